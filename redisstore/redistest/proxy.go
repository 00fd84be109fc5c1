package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// proxyDialTimeout bounds the proxy's dial to its target.
	proxyDialTimeout = 5 * time.Second
	// proxyStopTimeout bounds the wait for the proxy's goroutines at
	// cleanup.
	proxyStopTimeout = 10 * time.Second
	// proxyReadSize is the largest chunk one read takes from a connection.
	proxyReadSize = 32 << 10
	// proxyQueueBytes bounds the bytes waiting out the delay in one
	// direction of one connection. Once reached, the proxy stops reading
	// from the sender until the queue drains, as TCP flow control would.
	proxyQueueBytes = 4 << 20
)

// A Proxy forwards TCP connections to a target address, with a delay and
// partitions that a test sets while it runs: the link between two data
// centres in a multi-region test. Point a client at Addr instead of the
// server's address, then call SetDelay, Cut and Heal to change the link.
//
// The delay holds every chunk of data for the same time, in both
// directions, without holding up the chunks behind it, so it adds latency
// but does not limit throughput. A partition (Cut) behaves like a dead
// link rather than a stopped server: connections stay open and accept
// writes, but nothing arrives at either end, so clients see timeouts, not
// refused or reset connections.
//
// A Proxy is started by StartProxy and stopped by the test's cleanup. All
// methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled when the proxy stops; aborts dials
	cancel context.CancelFunc
	delay  atomic.Int64 // one-way delay, a time.Duration

	mu     sync.Mutex
	cut    bool                    // a partition is in force
	closed bool                    // the proxy has stopped
	conns  map[*proxyConn]struct{} // open connections
	wg     sync.WaitGroup          // every goroutine of the proxy
	done   chan struct{}           // closed once every goroutine has returned
}

// proxyConn is one proxied connection: the client's connection to the
// proxy and the proxy's connection to the target.
type proxyConn struct {
	p      *Proxy
	client net.Conn
	// broken is set by Cut: the connection passes nothing any more and
	// is closed by Heal. It is never cleared.
	broken atomic.Bool
	done   chan struct{} // closed by close

	mu       sync.Mutex
	upstream net.Conn // nil until dialled, or if accepted during a cut
	closed   bool
	halves   int // directions that ended with EOF, passed on as such
}

// chunk is data read from one side, due at the other side at due. eof
// marks the end of the stream, passed on as a half-close.
type chunk struct {
	data []byte
	due  time.Time
	eof  bool
}

// queue holds the chunks of one direction between the goroutine that reads
// them and the one that writes them.
type queue struct {
	mu     sync.Mutex
	chunks []chunk
	bytes  int
	ready  chan struct{} // signalled after a push
	space  chan struct{} // signalled after a pop
}

// StartProxy listens on a free port on 127.0.0.1 and forwards every
// connection it accepts to target, over a new connection the proxy dials.
// If that dial fails the client's connection is closed. The proxy starts
// with no delay and no partition.
//
// A t.Cleanup function stops the proxy: it closes the listener and every
// connection, at both ends, and waits for the proxy's goroutines to
// return.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: listening: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*proxyConn]struct{}),
		done:   make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return p
}

// Addr returns the address clients dial to reach the target through the
// proxy, "127.0.0.1:PORT".
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// SetDelay sets the one-way delay: every chunk of data the proxy reads,
// in either direction, is passed on d after it arrived, so a request and
// its reply take 2d longer. Data keeps its order, and chunks wait side by
// side, so the delay does not slow a stream down beyond adding d. The
// delay applies to data read from then on, on open connections too; data
// already waiting keeps the delay it got. d <= 0 means no delay.
func (p *Proxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(max(d, 0)))
}

// Cut starts a partition. Open connections stop passing data: bytes the
// proxy holds or reads from then on are dropped, in both directions, but
// the connections stay open, so a client's writes succeed and its reads
// time out, as over a dead link. The proxy still accepts new connections,
// which pass nothing either (the target does not see them). Every
// connection open during the partition is spoilt, having lost bytes, and
// is closed by Heal. Cutting a cut proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.broken.Store(true)
	}
}

// Heal ends a partition: it closes every connection that was open during
// it (so clients see them fail and dial again), and new connections pass
// data again. Healing a proxy that is not cut does nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	var spoilt []*proxyConn
	for c := range p.conns {
		if c.broken.Load() {
			spoilt = append(spoilt, c)
		}
	}
	p.mu.Unlock()
	for _, c := range spoilt {
		c.close()
	}
}

// Conns returns the number of connections the proxy holds open: those
// that pass data and, during a partition, those it holds without passing
// anything.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// stop closes the listener and every connection and waits, bounded, for
// the proxy's goroutines.
func (p *Proxy) stop() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	p.cancel()
	open := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	for _, c := range open {
		c.close()
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
	select {
	case <-p.done:
	case <-time.After(proxyStopTimeout):
		err = errors.Join(err, fmt.Errorf("proxy to %s: goroutines still running %v after stop", p.target, proxyStopTimeout))
	}
	if err != nil {
		return fmt.Errorf("stopping proxy to %s: %w", p.target, err)
	}
	return nil
}

// acceptLoop accepts connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or the like: wait and retry.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		c := &proxyConn{p: p, client: conn, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = conn.Close()
			return
		}
		c.broken.Store(p.cut)
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

// run dials the target, unless the connection came during a partition,
// and starts the goroutines that pass data.
func (c *proxyConn) run() {
	p := c.p
	defer p.wg.Done()
	var up net.Conn
	if !c.broken.Load() {
		d := net.Dialer{Timeout: proxyDialTimeout}
		conn, err := d.DialContext(p.ctx, "tcp", p.target)
		if err != nil {
			if !c.broken.Load() {
				// The target is down: the client sees its connection
				// closed, the nearest the proxy can come to a refusal.
				c.close()
				return
			}
			// The dial failed during a partition: hold the client.
		} else {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				_ = conn.Close()
				return
			}
			c.upstream, up = conn, conn
			c.mu.Unlock()
		}
	}
	if up == nil {
		// Accepted during a partition: swallow what the client sends
		// until it, Heal or stop closes the connection.
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(io.Discard, c.client)
			c.close()
		}()
		return
	}
	for _, fromClient := range []bool{true, false} {
		src, dst := c.client, up
		if !fromClient {
			src, dst = dst, src
		}
		q := &queue{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
		p.wg.Add(2)
		go c.read(src, q, fromClient)
		go c.write(dst, q, fromClient)
	}
}

// read reads src into q, stamping every chunk with the time it is due.
func (c *proxyConn) read(src net.Conn, q *queue, fromClient bool) {
	defer c.p.wg.Done()
	buf := make([]byte, proxyReadSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.broken.Load() {
			data := make([]byte, n)
			copy(data, buf[:n])
			due := time.Now().Add(time.Duration(c.p.delay.Load()))
			if !q.push(chunk{data: data, due: due}, c.done) {
				return
			}
		}
		if err == nil {
			continue
		}
		switch {
		case c.broken.Load() && !fromClient:
			// The target went away during a partition; over a dead link
			// the client would not learn of it. Keep its connection
			// until Heal.
		case c.broken.Load() || !errors.Is(err, io.EOF):
			// The client left during a partition, or a side failed.
			c.close()
		default:
			// A clean end of stream travels, delayed, like data.
			due := time.Now().Add(time.Duration(c.p.delay.Load()))
			q.push(chunk{eof: true, due: due}, c.done)
		}
		return
	}
}

// write passes the chunks of q on to dst once they are due, in order, and
// drops them during a partition.
func (c *proxyConn) write(dst net.Conn, q *queue, fromClient bool) {
	defer c.p.wg.Done()
	for {
		ch, ok := q.pop(c.done)
		if !ok {
			return
		}
		if !c.broken.Load() {
			if wait := time.Until(ch.due); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-timer.C:
				case <-c.done:
					timer.Stop()
					return
				}
			}
		}
		if c.broken.Load() {
			if ch.eof {
				if fromClient {
					c.close()
				}
				return
			}
			continue
		}
		if ch.eof {
			c.halfClose(dst)
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.close()
			return
		}
	}
}

// halfClose passes an end of stream on to dst, and closes the connection
// once both directions have ended.
func (c *proxyConn) halfClose(dst net.Conn) {
	cw, ok := dst.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		c.close()
		return
	}
	c.mu.Lock()
	c.halves++
	both := c.halves == 2
	c.mu.Unlock()
	if both {
		c.close()
	}
}

// close closes both sides of the connection and forgets it. It may be
// called more than once.
func (c *proxyConn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.done)
	up := c.upstream
	c.mu.Unlock()
	_ = c.client.Close()
	if up != nil {
		_ = up.Close()
	}
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// push appends ch to q, waiting while q is full. It returns false if done
// is closed first.
func (q *queue) push(ch chunk, done <-chan struct{}) bool {
	for {
		q.mu.Lock()
		// An empty queue takes any chunk, so a chunk larger than the
		// bound cannot wait forever.
		if len(q.chunks) == 0 || q.bytes+len(ch.data) <= proxyQueueBytes {
			q.chunks = append(q.chunks, ch)
			q.bytes += len(ch.data)
			q.mu.Unlock()
			signal(q.ready)
			return true
		}
		q.mu.Unlock()
		select {
		case <-q.space:
		case <-done:
			return false
		}
	}
}

// pop removes and returns the first chunk of q, waiting while q is empty.
// It returns false if done is closed first.
func (q *queue) pop(done <-chan struct{}) (chunk, bool) {
	for {
		q.mu.Lock()
		if len(q.chunks) > 0 {
			ch := q.chunks[0]
			q.chunks[0] = chunk{}
			q.chunks = q.chunks[1:]
			q.bytes -= len(ch.data)
			q.mu.Unlock()
			signal(q.space)
			return ch, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-done:
			return chunk{}, false
		}
	}
}

// signal wakes the goroutine waiting on ch, if any, without blocking. ch
// has a buffer of one, so a signal sent before the wait is not lost.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
