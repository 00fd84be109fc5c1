package fastport_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/fastport"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/rules"
)

// The request context of these tests has the methods of the package's
// constraints that Fiber's have, over the memory of one request, mem:
// every string and byte slice it returns is a view into mem, as fasthttp's
// are into the memory that it reuses for the next request. Overwriting
// mem (wipe) shows which values the package copied.
type ctx struct {
	mem                                         []byte
	method, path, pathOriginal, query, ip, body span
	uri                                         span
	header                                      []field
	peer                                        net.Addr
	locals                                      map[any]any
	app                                         *app
	route                                       *route
	ctx                                         context.Context
	caseSensitive                               bool

	next     int // calls of Next
	status   int
	sent     []byte
	response respHeader
}

type span struct{ at, n int }

type field struct{ name, value span }

type app struct{ name string }

// route is a route type of the shape of Fiber's.
type route struct {
	use  bool
	Path string
}

// request builds a ctx of a request whose method, target and header
// lines are copied into one buffer, from the peer 192.0.2.7:4711.
func request(method, target string, header ...[2]string) *ctx {
	c := &ctx{peer: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4711}, locals: map[any]any{},
		app: &app{"main"}, route: &route{Path: "/items/:id"},
		ctx: context.WithValue(context.Background(), app{}, "request")} // a context of its own
	put := func(s string) span {
		c.mem = append(c.mem, s...)
		return span{len(c.mem) - len(s), len(s)}
	}
	c.method = put(method)
	c.uri = put(target)
	path, query, _ := strings.Cut(target, "?")
	c.pathOriginal = put(path)
	c.path = put(unescape(path))
	if _, v, ok := strings.Cut(query, "c="); ok {
		c.query = put(v)
	}
	for _, h := range header {
		c.header = append(c.header, field{put(h[0]), put(h[1])})
	}
	c.ip = put("198.51.100.4")
	c.body = put("the body")
	return c
}

// unescape decodes the escapes of p, as Fiber's c.Path() (only %41, A, in
// these tests).
func unescape(p string) string { return strings.ReplaceAll(p, "%41", "A") }

func (c *ctx) str(s span) string  { return unsafe.String(&c.mem[s.at], s.n) }
func (c *ctx) view(s span) []byte { return c.mem[s.at : s.at+s.n] }

// wipe overwrites the memory of the request, as the next one would.
func (c *ctx) wipe() {
	for i := range c.mem {
		c.mem[i] = '#'
	}
}

func (c *ctx) Locals(key any, value ...any) any {
	if len(value) > 0 {
		c.locals[key] = value[0]
		return value[0]
	}
	return c.locals[key]
}
func (c *ctx) Method(...string) string { return c.str(c.method) }
func (c *ctx) Path(...string) string   { return c.str(c.path) }
func (c *ctx) Query(key string, _ ...string) string {
	if key != "c" || c.query.n == 0 {
		return ""
	}
	return c.str(c.query)
}
func (c *ctx) Get(key string, _ ...string) string {
	if vs := c.PeekAll(key); len(vs) > 0 {
		return unsafe.String(&vs[0][0], len(vs[0]))
	}
	return ""
}
func (c *ctx) IP() string             { return c.str(c.ip) }
func (c *ctx) App() *app              { return c.app }
func (c *ctx) Next() error            { c.next++; return nil }
func (c *ctx) Status(status int) *ctx { c.status = status; return c }
func (c *ctx) Send(body []byte) error { c.sent = body; return nil }
func (c *ctx) PeekAll(name string) [][]byte {
	var vs [][]byte
	for _, f := range c.header {
		if strings.EqualFold(c.str(f.name), name) {
			vs = append(vs, c.view(f.value))
		}
	}
	return vs
}

// The ctx is its own request header and request, as fasthttp's are
// fields of its request context.
func (c *ctx) RequestURI() []byte { return c.view(c.uri) }
func (c *ctx) Body() []byte       { return c.view(c.body) }

// headerOf is the request header of a ctx: fasthttp's *RequestHeader.
type headerOf ctx

func (h *headerOf) PeekAll(name string) [][]byte { return (*ctx)(h).PeekAll(name) }
func (h *headerOf) Method() []byte               { return (*ctx)(h).view(h.method) }

// respHeader is a response header that copies what it is given, as
// fasthttp's SetCanonical does, into memory that it reuses.
type respHeader struct{ fields []respField }

type respField struct {
	name  string
	value []byte
}

func (h *respHeader) SetCanonical(key, value []byte) {
	for i := range h.fields {
		if h.fields[i].name == string(key) {
			h.fields[i].value = append(h.fields[i].value[:0], value...)
			return
		}
	}
	h.fields = append(h.fields, respField{string(key), append([]byte(nil), value...)})
}

func (h *respHeader) Del(key string) {
	h.fields = slices.DeleteFunc(h.fields, func(f respField) bool { return f.name == key })
}

// get returns the value of the field name, if it is set.
func (h *respHeader) get(name string) (string, bool) {
	for _, f := range h.fields {
		if f.name == name {
			return string(f.value), true
		}
	}
	return "", false
}

// framework is the package's Framework over ctx.
type framework struct{}

func (framework) Context(c *ctx) context.Context          { return c.ctx }
func (framework) Peer(c *ctx) net.Addr                    { return c.peer }
func (framework) Header(c *ctx) *headerOf                 { return (*headerOf)(c) }
func (framework) Response(c *ctx) fastport.ResponseHeader { return &c.response }
func (framework) Request(c *ctx) fastport.Request         { return c }
func (framework) PathOriginal(c *ctx) []byte              { return c.view(c.pathOriginal) }
func (framework) CaseSensitive(c *ctx) bool               { return c.caseSensitive }
func (framework) Route(c *ctx) string                     { return routes.Pattern(c.route) }

var routes = fastport.NewRoutes[route]()

type port = fastport.Port[*ctx, framework, *headerOf]

var _ adapter.Port[*ctx] = port{}

type userKey struct{}

// TestViewCopies: every string the view returns outlives the memory of
// its request, as the rules engine keeps them as keys.
func TestViewCopies(t *testing.T) {
	c := request("PURGE", "/Items/%41b?c=client-1", [2]string{"X-Client", "alice"}, [2]string{"x-client", "bob"})
	c.Locals(userKey{}, c.Get("X-Client")) // request memory, as a middleware may store it
	r := port{}.Request(c)

	got := []string{r.Method(), r.Path(), r.EscapedPath(), r.Query("c"), r.RemoteAddr(), r.Route(), r.Value(userKey{}).(string)}
	got = append(got, r.Values("X-Client")...)
	want := []string{"PURGE", "/items/ab", "/items/%41b", "client-1", "192.0.2.7:4711", "/items/:id", "alice", "alice", "bob"}
	require.Equal(t, want, got)
	c.wipe()
	assert.Equal(t, want, got, "the values outlive the request's memory")
	assert.Equal(t, "", r.Query("other"))
	assert.Nil(t, r.Values("X-None"))
}

// TestViewPath: the path is lower-cased unless the app is case-sensitive,
// as Fiber compares paths, and copied either way; EscapedPath is "" without
// escapes.
func TestViewPath(t *testing.T) {
	c := request("GET", "/Items/%41b")
	assert.Equal(t, "/items/ab", port{}.Request(c).Path())
	assert.Equal(t, "/items/%41b", port{}.Request(c).EscapedPath())
	c.caseSensitive = true
	path, escaped := port{}.Request(c).Path(), port{}.Request(c).EscapedPath()
	c.wipe()
	assert.Equal(t, "/Items/Ab", path, "copied, unchanged")
	assert.Equal(t, "/Items/%41b", escaped, "copied, unchanged")
	assert.Equal(t, "", port{}.Request(request("GET", "/Items")).EscapedPath())
}

// TestViewValue: Value reads c.Locals, else the context; a string is
// copied, any other value returned as it is.
func TestViewValue(t *testing.T) {
	type ctxKey struct{}
	c := request("GET", "/")
	c.ctx = context.WithValue(context.Background(), ctxKey{}, 42)
	n := new(int)
	c.Locals("n", n)
	r := port{}.Request(c)
	assert.Equal(t, 42, r.Value(ctxKey{}))
	assert.Same(t, n, r.Value("n"))
	assert.Nil(t, r.Value("none"))
	assert.Same(t, c.ctx, r.Context())
}

// TestRoutes: the pattern of a route proper; "" for a route of app.Use or
// a group, and for a route type without the field use.
func TestRoutes(t *testing.T) {
	assert.Equal(t, "/items/:id", routes.Pattern(&route{Path: "/items/:id"}))
	assert.Equal(t, "", routes.Pattern(&route{use: true, Path: "/api"}))
	assert.Equal(t, "", routes.Pattern(nil))
	type other struct{ Path string }
	assert.Equal(t, "", fastport.NewRoutes[other]().Pattern(&other{Path: "/items"}))
}

func TestPort(t *testing.T) {
	c := request("GET", "/")
	p := port{}
	assert.Same(t, c.ctx, p.Context(c))

	p.Header(c, "X-RateLimit-Limit", []string{"10"})
	v, ok := c.response.get("X-RateLimit-Limit")
	assert.True(t, ok)
	assert.Equal(t, "10", v)
	p.Header(c, "X-RateLimit-Limit", nil)
	_, ok = c.response.get("X-RateLimit-Limit")
	assert.False(t, ok, "removed")

	_, ok = fastport.Decision(c)
	assert.False(t, ok)
	assert.Same(t, c, p.Keep(c, core.Decision{Name: "api", Remaining: 3}))
	d, ok := fastport.Decision(c)
	assert.True(t, ok)
	assert.Equal(t, core.Decision{Name: "api", Remaining: 3}, d)

	require.NoError(t, p.Next(c))
	assert.Equal(t, 1, c.next)
	require.NoError(t, p.Write(c, http.StatusTooManyRequests, []byte("slow down")))
	assert.Equal(t, http.StatusTooManyRequests, c.status)
	assert.Equal(t, "slow down", string(c.sent))

	ended := errors.New("ended")
	assert.Same(t, ended, p.Stop(c, ended))
	assert.NoError(t, p.Stop(c, nil))
}

// TestPortOffer: the queued item is the request's method, target, listed
// header fields and body, intact after its memory is reused.
func TestPortOffer(t *testing.T) {
	q, err := queue.NewMemory(queue.MemoryOptions{Capacity: 2})
	require.NoError(t, err)
	offer, err := queue.NewOffer(q, queue.Options{Headers: []string{"Content-Type"}, MaxBody: 16})
	require.NoError(t, err)
	c := request("POST", "/orders?c=1", [2]string{"Content-Type", "text/plain"}, [2]string{"X-Other", "no"})
	rep := port{}.Offer(c, offer, core.Decision{Name: "orders"})
	require.Equal(t, http.StatusAccepted, rep.Status)
	c.wipe()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	it, err := q.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "POST", it.Method)
	assert.Equal(t, "/orders?c=1", it.Target)
	assert.Equal(t, "the body", string(it.Body))
	assert.Equal(t, http.Header{"Content-Type": {"text/plain"}}, it.Header)
}

// TestKeysCopied: every key outlives the memory of its request.
func TestKeysCopied(t *testing.T) {
	c := request("GET", "/", [2]string{"X-Forwarded-For", "203.0.113.9"}, [2]string{"X-Client", " alice "})
	c.Locals(userKey{}, c.Get("X-Client")[1:6])
	ip, err := fastport.IP[framework](keyfuncs.TrustedProxies("192.0.2.0/24"))
	require.NoError(t, err)
	var got []string
	for _, key := range []func(*ctx) (string, error){
		ip,
		fastport.Header[*ctx]("X-Client"),
		fastport.ContextValue[*ctx]("fastport_test", userKey{}),
		fastport.ClientIP[*ctx]("fastport_test", c.app),
	} {
		k, err := key(c)
		require.NoError(t, err)
		got = append(got, k)
	}
	want := []string{"203.0.113.9", "alice", "alice", "198.51.100.4"}
	require.Equal(t, want, got)
	c.wipe()
	assert.Equal(t, want, got)
}

func TestKeyErrors(t *testing.T) {
	c := request("GET", "/")
	_, err := fastport.Header[*ctx]("X-None")(c)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	_, err = fastport.ContextValue[*ctx]("fastport_test", "none")(c)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.ErrorContains(t, err, "fastport_test: c.Locals(\"none\")")
	_, err = fastport.ContextValue[*ctx]("fastport_test", nil)(c)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
	_, err = fastport.ClientIP[*ctx]("fastport_test", &app{"main"})(c)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured, "served by another app")
	assert.ErrorContains(t, err, "fastport_test: ClientIP")
	c.ip = c.method
	_, err = fastport.ClientIP[*ctx]("fastport_test", c.app)(c)
	assert.ErrorIs(t, err, keyfuncs.ErrMissing, "c.IP() that is no address")
	_, err = fastport.IP[framework](keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
}

// TestPeerKey: the key of the TCP peer, as keyfuncs.PeerIP's, and the
// address that the view reports, for every form of peer.
func TestPeerKey(t *testing.T) {
	for _, tc := range []struct {
		peer      net.Addr
		key, addr string
	}{
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4711}, "192.0.2.7", "192.0.2.7:4711"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 443}, "2001:db8:1:2::/64", "[2001:db8:1:2:3:4:5:6]:443"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"}, "fe80::/64", "[fe80::1%eth0]:80"},
		{&net.TCPAddr{IP: net.IP{192, 0, 2, 8}, Port: 1}, "192.0.2.8", "192.0.2.8:1"},
	} {
		k, err := fastport.PeerKey(tc.peer)
		require.NoError(t, err, tc.peer)
		assert.Equal(t, tc.key, k, tc.peer)
		want, err := keyfuncs.PeerIP(&http.Request{RemoteAddr: tc.peer.String()})
		require.NoError(t, err)
		assert.Equal(t, want, k, "as keyfuncs.PeerIP")
		c := request("GET", "/")
		c.peer = tc.peer
		assert.Equal(t, tc.addr, port{}.Request(c).RemoteAddr())
	}

	for _, peer := range []net.Addr{&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, &net.TCPAddr{}} {
		_, err := fastport.PeerKey(peer)
		assert.ErrorIs(t, err, keyfuncs.ErrMissing, peer)
	}
}

// TestAllocs: the view converts to rules.Request, and the request header
// to adapter.HeaderValues (in IP), without allocating; a standard method
// is a constant; a hot peer's key costs nothing; the port's header fields
// and context cost nothing.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	c := request("GET", "/Items", [2]string{"X-Client", "alice"})
	ip, err := fastport.IP[framework]()
	require.NoError(t, err)
	var (
		view rules.Request
		str  string
		ctxt context.Context
	)
	for _, tc := range []struct {
		name string
		f    func()
		want float64
	}{
		{"Request", func() { view = port{}.Request(c) }, 0},
		{"Method, standard", func() { str = port{}.Request(c).Method() }, 0},
		{"Path: its copy", func() { str = port{}.Request(c).Path() }, 1},
		{"RemoteAddr: its string", func() { str = port{}.Request(c).RemoteAddr() }, 1},
		{"PeerKey", func() { str, _ = fastport.PeerKey(c.peer) }, 0},
		{"IP: the peer's string, whose key is a substring", func() { str, _ = ip(c) }, 1},
		{"Header, set", func() { port{}.Header(c, "X-RateLimit-Limit", []string{"10"}) }, 0},
		{"Header, removed", func() { port{}.Header(c, "X-RateLimit-Limit", nil) }, 0},
		{"Context", func() { ctxt = port{}.Context(c) }, 0},
	} {
		tc.f()
		assert.Equal(t, tc.want, testing.AllocsPerRun(100, tc.f), tc.name)
	}
	_, _, _ = view, str, ctxt
}
