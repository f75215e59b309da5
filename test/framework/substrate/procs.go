package substrate

import (
	"bytes"
	"io"
	"net"
	"os"
	"sync"
)

// PrefixWriter writes each complete line written to it to w, prefixed with
// "[name] ": the output of several processes started by a test or the demo,
// interleaved on one stream, stays attributable.
func PrefixWriter(w io.Writer, name string) io.Writer {
	return &linePrefixer{w: w, prefix: "[" + name + "] "}
}

type linePrefixer struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := io.WriteString(l.w, l.prefix+string(l.buf[:i+1])); err != nil {
			return len(p), err
		}
		l.buf = l.buf[i+1:]
	}
}

// Tail is the last n bytes of the file at path (a process's log), or the
// error reading it.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// FreePorts returns n distinct loopback ports free at the time of the call,
// for components that must be told their ports before they start.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
