package gitremote

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Limits bound one operation with a git server.
type Limits struct {
	// Timeout bounds the whole operation, from the first connection to the
	// last byte; 0 leaves it to the caller's context.
	Timeout time.Duration
	// ConnectTimeout bounds each TCP connection; default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// IdleTimeout fails the operation when the server sends nothing (and
	// takes nothing) for this long; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxBytes caps what is read from the server; 0 for no cap.
	MaxBytes int64

	// TimeoutFlag, IdleFlag and BytesFlag name the settings behind the
	// limits (flags such as "--git-timeout"), for the messages of a
	// LimitError.
	TimeoutFlag, IdleFlag, BytesFlag string
}

// Defaults of the operator's and the agent's flags.
const (
	DefaultConnectTimeout  = 10 * time.Second
	DefaultIdleTimeout     = 30 * time.Second
	DefaultListTimeout     = time.Minute
	DefaultMaxListingBytes = 64 << 20
	DefaultMaxFetchBytes   = 4 << 30
)

func (l Limits) connect() time.Duration {
	if l.ConnectTimeout > 0 {
		return l.ConnectTimeout
	}
	return DefaultConnectTimeout
}

func (l Limits) idle() time.Duration {
	if l.IdleTimeout > 0 {
		return l.IdleTimeout
	}
	return DefaultIdleTimeout
}

// What a LimitError says was exceeded.
const (
	LimitConnect = "connect"
	LimitIdle    = "idle"
	LimitTime    = "time"
	LimitBytes   = "bytes"
)

// LimitError: a git server exceeded one of the operation's limits. Its
// message names the server (host and port, never user info) and the limit.
// It is transient: the server may answer next time.
type LimitError struct {
	// Host is the server's host:port.
	Host string
	// Limit is LimitConnect, LimitIdle, LimitTime or LimitBytes.
	Limit string
	// After is the duration that ran out, or Bytes the cap that was passed.
	After time.Duration
	Bytes int64
	// Flag names the setting behind the limit, if any.
	Flag string
}

func (e *LimitError) Error() string {
	var msg string
	switch e.Limit {
	case LimitConnect:
		msg = fmt.Sprintf("git server %s: no connection within %s", e.Host, e.After)
	case LimitIdle:
		msg = fmt.Sprintf("git server %s sent nothing for %s", e.Host, e.After)
	case LimitTime:
		msg = fmt.Sprintf("git server %s did not finish within %s", e.Host, e.After)
	case LimitBytes:
		msg = fmt.Sprintf("git server %s sent more than %s", e.Host, byteSize(e.Bytes))
	default:
		msg = fmt.Sprintf("git server %s exceeded a limit", e.Host)
	}
	if e.Flag != "" {
		msg += " (" + e.Flag + ")"
	}
	return msg
}

// Timeout makes a LimitError a timeout for the callers that ask (net.Error),
// the byte cap included: the server may answer within it next time.
func (e *LimitError) Timeout() bool   { return e.Limit != LimitBytes }
func (e *LimitError) Temporary() bool { return true }

// byteSize spells n in the largest binary unit that divides it, as the flags
// take it ("64MiB").
func byteSize(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// The flags the operator and the agent share: the operator passes its own
// values on to every agent.
const (
	IdleTimeoutFlag   = "--git-idle-timeout"
	MaxFetchBytesFlag = "--git-max-fetch-bytes"
)

// AgentArgs are the agent flags for l's idle timeout and byte cap where they
// differ from the agent's defaults (DefaultIdleTimeout, DefaultMaxFetchBytes):
// an operator left at its defaults gives agents the command line it always
// gave them, and rolls no workspace pod.
func (l Limits) AgentArgs() []string {
	var args []string
	if l.IdleTimeout > 0 && l.IdleTimeout != DefaultIdleTimeout {
		args = append(args, IdleTimeoutFlag+"="+l.IdleTimeout.String())
	}
	if l.MaxBytes > 0 && l.MaxBytes != DefaultMaxFetchBytes {
		args = append(args, MaxFetchBytesFlag+"="+ByteSize(l.MaxBytes).String())
	}
	return args
}

// ByteSize is a flag value counting bytes, written as a Kubernetes quantity
// ("64Mi", "4Gi", "500000").
type ByteSize int64

// Set parses a quantity of bytes.
func (b *ByteSize) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a byte size (e.g. 64Mi, 4Gi)", s)
	}
	v, ok := q.AsInt64()
	if !ok || v <= 0 {
		return fmt.Errorf("%q is not a positive whole number of bytes (e.g. 64Mi, 4Gi)", s)
	}
	*b = ByteSize(v)
	return nil
}

func (b ByteSize) String() string { return resource.NewQuantity(int64(b), resource.BinarySI).String() }
