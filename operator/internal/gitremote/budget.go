package gitremote

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// budget is what one operation may still spend: it makes the operation's
// connections and holds them to its limits. Ending the operation (its
// context, or close) closes every connection it made, which is what stops a
// go-git call blocked where it does not look at its context.
type budget struct {
	host     string
	limits   Limits
	deadline time.Time // zero: none
	read     atomic.Int64

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	err    *LimitError // the first limit crossed
}

func newBudget(host string, l Limits, deadline time.Time) *budget {
	return &budget{host: host, limits: l, deadline: deadline}
}

// trip records the first limit crossed and returns it.
func (b *budget) trip(limit string) *LimitError {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		e := &LimitError{Host: b.host, Limit: limit}
		switch limit {
		case LimitConnect:
			e.After = b.limits.connect()
		case LimitIdle:
			e.After, e.Flag = b.limits.idle(), b.limits.IdleFlag
		case LimitTime:
			e.After, e.Flag = b.limits.Timeout, b.limits.TimeoutFlag
		case LimitBytes:
			e.Bytes, e.Flag = b.limits.MaxBytes, b.limits.BytesFlag
		}
		b.err = e
	}
	return b.err
}

func (b *budget) tripped() *LimitError {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// close ends the operation: every connection is closed, and no new one is
// made.
func (b *budget) close() {
	b.mu.Lock()
	conns := b.conns
	b.conns, b.closed = nil, true
	b.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// errEnded: the operation's budget was closed (its context ended).
var errEnded = errors.New("the git operation ended")

// DialContext connects to addr within the connect timeout and the
// operation's deadline. It is the x/net/proxy dialer of the SSH transport
// and, through the request's context, the HTTP transport's.
func (b *budget) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: b.limits.connect(), Deadline: b.deadline}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if b.pastDeadline() {
				return nil, b.deadlineError()
			}
			return nil, b.trip(LimitConnect)
		}
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = c.Close()
		return nil, errEnded
	}
	b.conns = append(b.conns, c)
	b.mu.Unlock()
	return &conn{Conn: c, b: b}, nil
}

// Dial is DialContext without a context (x/net/proxy.Dialer).
func (b *budget) Dial(network, addr string) (net.Conn, error) {
	return b.DialContext(context.Background(), network, addr)
}

// conn holds a connection to its operation's budget.
type conn struct {
	net.Conn
	b *budget
}

// deadline is when the current read or write must end: the idle timeout from
// now, or the operation's deadline if sooner.
func (c *conn) deadline() time.Time {
	d := time.Now().Add(c.b.limits.idle())
	if !c.b.deadline.IsZero() && c.b.deadline.Before(d) {
		d = c.b.deadline
	}
	return d
}

func (c *conn) Read(p []byte) (int, error) {
	if e := c.b.tripped(); e != nil {
		return 0, e
	}
	if limit := c.b.limits.MaxBytes; limit > 0 {
		// Read at most one byte past the cap: enough to know it was passed.
		if left := limit - c.b.read.Load() + 1; int64(len(p)) > left {
			p = p[:max(left, 1)]
		}
	}
	_ = c.Conn.SetReadDeadline(c.deadline())
	n, err := c.Conn.Read(p)
	total := c.b.read.Add(int64(n))
	if limit := c.b.limits.MaxBytes; limit > 0 && total > limit {
		_ = c.Conn.Close()
		return 0, c.b.trip(LimitBytes)
	}
	return n, c.explain(err)
}

func (c *conn) Write(p []byte) (int, error) {
	if e := c.b.tripped(); e != nil {
		return 0, e
	}
	_ = c.Conn.SetWriteDeadline(c.deadline())
	n, err := c.Conn.Write(p)
	return n, c.explain(err)
}

// explain turns a deadline that passed into the limit it stands for.
func (c *conn) explain(err error) error {
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if c.b.pastDeadline() {
		return c.b.deadlineError()
	}
	return c.b.trip(LimitIdle)
}

func (b *budget) pastDeadline() bool {
	return !b.deadline.IsZero() && !time.Now().Before(b.deadline)
}

// deadlineError: the operation's deadline passed. It is a limit of the
// operation's own (Limits.Timeout), or else the caller's, which the caller
// explains.
func (b *budget) deadlineError() error {
	if b.limits.Timeout > 0 {
		return b.trip(LimitTime)
	}
	return context.DeadlineExceeded
}

// budgets holds the budgets of the operations under way, by the ID their
// SSH proxy URL carries.
var budgets struct {
	sync.Mutex
	next int64
	m    map[string]*budget
}

func register(b *budget) (id string, unregister func()) {
	budgets.Lock()
	defer budgets.Unlock()
	if budgets.m == nil {
		budgets.m = map[string]*budget{}
	}
	budgets.next++
	id = "op" + strconv.FormatInt(budgets.next, 10)
	budgets.m[id] = b
	return id, func() {
		budgets.Lock()
		defer budgets.Unlock()
		delete(budgets.m, id)
	}
}

func lookup(id string) (*budget, bool) {
	budgets.Lock()
	defer budgets.Unlock()
	b, ok := budgets.m[id]
	return b, ok
}

type budgetKey struct{}

func fromContext(ctx context.Context) *budget {
	b, _ := ctx.Value(budgetKey{}).(*budget)
	return b
}
