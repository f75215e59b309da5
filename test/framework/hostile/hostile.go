// Package hostile serves git servers that misbehave the ways a Stack author
// can make one misbehave: a listener that accepts and never answers, one that
// answers a byte at a time, and one that advertises references for ever —
// over SSH, plain HTTP and HTTPS. Tests point Stacks (or the git client
// directly) at them and check that every operation ends within its bounds.
//
// HTTPS servers present a certificate of a test CA (CAFile): set
// SSL_CERT_FILE to it before the process first verifies a certificate.
package hostile

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Behaviour is how a server misbehaves.
type Behaviour string

const (
	// Silent accepts connections and never sends a byte.
	Silent Behaviour = "silent"
	// Drip sends its answer one byte every DripEvery, for ever.
	Drip Behaviour = "drip"
	// EndlessRefs answers as a git server whose reference advertisement
	// never ends, as fast as the client reads.
	EndlessRefs Behaviour = "endless-refs"
)

// Behaviours are all of them, for tables.
var Behaviours = []Behaviour{Silent, Drip, EndlessRefs}

// DripEvery is the pace of a Drip server.
const DripEvery = time.Second

// Server is one misbehaving git server.
type Server struct {
	// URL is a repository URL on it (ssh://, http:// or https://).
	URL string
	// Addr is its host:port.
	Addr string
	// KnownHosts is the known_hosts line of an SSH server's host key.
	KnownHosts string

	mu    sync.Mutex
	conns int
}

// Accepted is how many connections the server accepted.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// serve accepts on l until the test ends, handling each connection with h;
// every connection is closed then.
func (s *Server) serve(t testing.TB, l net.Listener, h func(net.Conn, <-chan struct{})) {
	s.Addr = l.Addr().String()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				h(c, done)
			}()
		}
	}()
	t.Cleanup(func() {
		close(done)
		_ = l.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// silent holds the connection open, reading and discarding what comes (so
// the client's writes never block), until the test ends.
func silent(c net.Conn, done <-chan struct{}) {
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	<-done
}

// drip writes prefix, then filler, one byte every DripEvery, until the
// client goes or the test ends.
func drip(c net.Conn, done <-chan struct{}, prefix string, filler byte) {
	go silentRead(c)
	tick := time.NewTicker(DripEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		b := filler
		if i < len(prefix) {
			b = prefix[i]
		}
		if _, err := c.Write([]byte{b}); err != nil {
			return
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

func silentRead(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// pkt is a git pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// advertisement writes, until the client goes or the test ends, a reference
// advertisement that never ends: a first line with capabilities, then one
// branch after another.
func advertisement(w interface{ Write([]byte) (int, error) }, done <-chan struct{}) {
	const sha = "1111111111111111111111111111111111111111"
	if _, err := w.Write([]byte(pkt(sha + " HEAD\x00multi_ack side-band-64k ofs-delta\n"))); err != nil {
		return
	}
	buf := make([]byte, 0, 64<<10)
	for i := 0; ; {
		buf = buf[:0]
		for len(buf) < 60<<10 {
			buf = append(buf, pkt(fmt.Sprintf("%s refs/heads/branch-%09d\n", sha, i))...)
			i++
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		select {
		case <-done:
			return
		default:
		}
	}
}

// HTTP starts a smart-HTTP git server behaving as b, over TLS when secure.
func HTTP(t testing.TB, b Behaviour, secure bool) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if secure {
		l = tls.NewListener(l, serverTLS(t))
		scheme = "https"
	}
	s := &Server{}
	s.serve(t, l, func(c net.Conn, done <-chan struct{}) {
		switch b {
		case Silent:
			silent(c, done)
		case Drip:
			// A status line, then a header that never ends.
			drip(c, done, "HTTP/1.1 200 OK\r\nX-Drip: ", 'a')
		case EndlessRefs:
			go silentRead(c)
			head := "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nCache-Control: no-cache\r\n\r\n"
			if _, err := c.Write([]byte(head + pkt("# service=git-upload-pack\n") + "0000")); err != nil {
				return
			}
			advertisement(c, done)
		}
	})
	s.URL = scheme + "://" + s.Addr + "/repo.git"
	return s
}

// SSH starts an SSH git server behaving as b. An EndlessRefs server is a real
// SSH server that accepts any client key and answers git-upload-pack with
// the endless advertisement; Silent and Drip never finish the SSH banner.
func SSH(t testing.TB, b Behaviour) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil },
		NoClientAuth:      true,
	}
	cfg.AddHostKey(signer)
	s := &Server{}
	s.serve(t, l, func(c net.Conn, done <-chan struct{}) {
		switch b {
		case Silent:
			silent(c, done)
		case Drip:
			drip(c, done, "SSH-2.0-", 'x')
		case EndlessRefs:
			endlessSSH(c, cfg, done)
		}
	})
	s.URL = "ssh://git@" + s.Addr + "/repo.git"
	s.KnownHosts = knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, signer.PublicKey()) + "\n"
	return s
}

func endlessSSH(c net.Conn, cfg *ssh.ServerConfig, done <-chan struct{}) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			for r := range creqs {
				_ = r.Reply(r.Type == "exec" || r.Type == "env", nil)
				if r.Type == "exec" {
					go func() {
						defer ch.Close()
						advertisement(ch, done)
					}()
				}
			}
		}()
	}
}

var ca struct {
	once sync.Once
	cert tls.Certificate
	file string
	err  error
}

// CAFile is a PEM file holding the CA that the HTTPS servers' certificates
// chain to (valid for 127.0.0.1): the SSL_CERT_FILE a client process needs.
func CAFile(t testing.TB) string {
	t.Helper()
	loadCA()
	if ca.err != nil {
		t.Fatal(ca.err)
	}
	return ca.file
}

func serverTLS(t testing.TB) *tls.Config {
	t.Helper()
	loadCA()
	if ca.err != nil {
		t.Fatal(ca.err)
	}
	return &tls.Config{Certificates: []tls.Certificate{ca.cert}, MinVersion: tls.VersionTLS12}
}

// loadCA makes one self-signed certificate for 127.0.0.1 per process and
// writes it where CAFile says.
func loadCA() {
	ca.once.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			ca.err = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stackflow hostile test server"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
			IsCA: true, BasicConstraintsValid: true,
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			ca.err = err
			return
		}
		ca.cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
		dir, err := os.MkdirTemp("", "stackflow-hostile-ca-")
		if err != nil {
			ca.err = err
			return
		}
		ca.file = filepath.Join(dir, "ca.pem")
		ca.err = os.WriteFile(ca.file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	})
}
