package ratekitgin

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/internal/episode"
	"github.com/ratekit/ratekit/keyfuncs"
)

var peer, _ = adapter.NewClientIP()

// PeerIP is the key of the TCP peer address (c.Request.RemoteAddr), as
// keyfuncs.PeerIP: IPv4 clients by address, IPv6 clients by their /64. It
// never reads a header, so no client can choose its bucket: the safe
// default. Behind a reverse proxy, use IP with keyfuncs.TrustedProxies.
func PeerIP(c *gin.Context) (string, error) {
	return peer.Key(c.Request)
}

// IP returns the key of the client address behind trusted proxies, as
// keyfuncs.IP resolves it: the TCP peer, unless the peer is one of the
// keyfuncs.TrustedProxies, whose proxy header is then walked from the
// right. It is independent of the engine's SetTrustedProxies.
//
//	ip, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
func IP(opts ...keyfuncs.IPOption) (Key, error) {
	f, err := keyfuncs.IP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) (string, error) { return f(c.Request) }, nil
}

// ClientIP returns the key of Gin's own client address, c.ClientIP(), on
// the engine r, made canonical as PeerIP's. A value that is not an address
// is an error wrapping keyfuncs.ErrMissing (400).
//
// c.ClientIP() is only as safe as the engine's proxy settings, and Gin's
// defaults are not: until SetTrustedProxies is called, Gin believes the
// X-Forwarded-For or X-Real-IP of every peer, and a TrustedPlatform header
// from every peer. ClientIP therefore checks r when it is called and
// returns an error wrapping keyfuncs.ErrMisconfigured, naming the setting
// to change, if r is nil, if r.TrustedPlatform or r.AppEngine is set, or
// if c.ClientIP() of a request from a peer that is no proxy is an address
// forged in a header (adapter.ProbeClientIP). Configure the engine first:
//
//	r := gin.New()
//	err := r.SetTrustedProxies([]string{"10.0.0.0/8"}) // your proxies; nil for none
//	...
//	ip, err := ratekitgin.ClientIP(r)
//
// The settings stay checked for the life of the engine. Each request
// compares them (SetTrustedProxies, TrustedPlatform, AppEngine,
// ForwardedByClientIP, RemoteIPHeaders) with those last checked, without
// allocating, and a change is checked again as above. A change that keeps
// c.ClientIP() safe, such as other or fewer proxies, is followed. A change
// that lets a client choose its address is not honoured: until the
// settings are safe again the key is PeerIP's, the TCP peer, so that the
// limit holds whatever the error handler does (behind a proxy, every
// client then shares the proxy's address), and slog.Default() receives one
// error line when such an episode starts and one, with the count of
// requests keyed by the peer, when it ends.
//
// Behind a platform that sets its own header, use IP with the platform's
// addresses and keyfuncs.ProxyHeader instead.
func ClientIP(r *gin.Engine) (Key, error) {
	if r == nil {
		return nil, fmt.Errorf("ratekitgin: ClientIP: %w: nil engine", keyfuncs.ErrMisconfigured)
	}
	if !cidrsOK {
		return nil, fmt.Errorf("ratekitgin: ClientIP: %w: this version of Gin keeps its trusted proxies where ClientIP "+
			"cannot see a change of them; key with ratekitgin.IP(keyfuncs.TrustedProxies(<your proxies>))", keyfuncs.ErrMisconfigured)
	}
	w := &trustWatch{r: r}
	st := &trustState{settings: settingsOf(r), refused: check(r)}
	if st.refused != nil {
		return nil, st.refused
	}
	w.state.Store(st)
	return func(c *gin.Context) (string, error) {
		if st := w.current(); st.refused != nil {
			w.refuse(st)
			return peer.Key(c.Request)
		}
		k, err := peer.KeyFrom(c.ClientIP(), nil) // with or without port
		if err != nil {
			// Gin finds no address in a RemoteAddr without port: say why.
			if perr := adapter.CheckRemoteAddr(c.Request.RemoteAddr); perr != nil {
				return "", perr
			}
		}
		return k, err
	}, nil
}

// check returns the error of ClientIP for an engine whose c.ClientIP()
// believes a header from a peer that is no proxy, or nil.
func check(r *gin.Engine) error {
	if r.TrustedPlatform != "" || r.AppEngine {
		return fmt.Errorf("ratekitgin: ClientIP: %w: engine.TrustedPlatform (%q) or the deprecated engine.AppEngine is set, "+
			"so Gin takes the platform's header from every peer, proxy or not; unset them, and behind the platform key with "+
			"ratekitgin.IP(keyfuncs.TrustedProxies(<the platform's addresses>), keyfuncs.ProxyHeader(<its header>))",
			keyfuncs.ErrMisconfigured, r.TrustedPlatform)
	}
	err := adapter.ProbeClientIP(func(p netip.AddrPort, h http.Header) string {
		c := gin.CreateTestContextOnly(nil, r)
		c.Request, _ = http.NewRequest(http.MethodGet, "/", nil) // cannot fail
		c.Request.RemoteAddr, c.Request.Header = p.String(), h
		return c.ClientIP()
	}, r.RemoteIPHeaders...)
	if err != nil {
		return fmt.Errorf("ratekitgin: ClientIP: %w; call engine.SetTrustedProxies with your proxies' addresses "+
			"(nil for none) before ClientIP, or set engine.ForwardedByClientIP = false", err)
	}
	return nil
}

// settings is what c.ClientIP() reads of an engine, compared by identity
// where it is a slice: SetTrustedProxies replaces the engine's unexported
// trustedCIDRs, and keeping the replaced array here keeps its address from
// being reused for the next.
type settings struct {
	platform           string
	appEngine, forward bool
	headers            *string // &RemoteIPHeaders[0]
	nHeaders           int
	cidrs              unsafe.Pointer // trustedCIDRs' array
	nCIDRs             int
}

// cidrsField is the index of gin.Engine's trustedCIDRs, if cidrsOK.
var cidrsField, cidrsOK = func() (int, bool) {
	f, ok := reflect.TypeFor[gin.Engine]().FieldByName("trustedCIDRs")
	if !ok || len(f.Index) != 1 || f.Type.Kind() != reflect.Slice {
		return 0, false
	}
	return f.Index[0], true
}()

// settingsOf returns r's settings now. It does not allocate.
func settingsOf(r *gin.Engine) settings {
	s := settings{platform: r.TrustedPlatform, appEngine: r.AppEngine, forward: r.ForwardedByClientIP, nHeaders: len(r.RemoteIPHeaders)}
	if s.nHeaders > 0 {
		s.headers = &r.RemoteIPHeaders[0]
	}
	cidrs := reflect.ValueOf(r).Elem().Field(cidrsField)
	s.cidrs, s.nCIDRs = cidrs.UnsafePointer(), cidrs.Len()
	return s
}

// A trustState is the verdict of check on an engine's settings: refused
// is nil where they are safe.
type trustState struct {
	settings settings
	refused  error
}

// A trustWatch checks an engine's settings again when they change, and
// logs the episodes during which they are refused.
type trustWatch struct {
	r       *gin.Engine
	state   atomic.Pointer[trustState]
	mu      sync.Mutex // held while checking
	refusal episode.Log
}

// current returns the verdict on the engine's settings now.
func (w *trustWatch) current() *trustState {
	if st := w.state.Load(); st.settings == settingsOf(w.r) {
		return st
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := settingsOf(w.r)
	if st := w.state.Load(); st.settings == s {
		return st
	}
	st := &trustState{settings: s, refused: check(w.r)}
	w.state.Store(st)
	if st.refused == nil {
		if end, n := w.refusal.Recover(); end {
			slog.Default().Info("ratekitgin: ClientIP: the engine's proxy settings are safe again; keying by c.ClientIP()",
				"peer_keyed_requests", n)
		}
	}
	return st
}

// refuse counts a request keyed by its peer under st, and logs when an
// episode starts.
func (w *trustWatch) refuse(st *trustState) {
	if start, _ := w.refusal.Fail(); start {
		slog.Default().Error("ratekitgin: ClientIP: the engine's proxy settings changed and would let clients choose "+
			"their key; keying by the TCP peer until they are made safe", "error", st.refused)
	}
}

// Header returns the key of the named request header, such as an API key:
// Adapt(keyfuncs.Header(name)).
func Header(name string) Key {
	return Adapt(keyfuncs.Header(name))
}

// Adapt returns the Key of a net/http key function, applied to
// c.Request, so that every function of package keyfuncs (Query, Route,
// Join, First...) and any of your own serve Gin as well:
//
//	ratekitgin.Adapt(keyfuncs.Join(keyfuncs.Route(), keyfuncs.PeerIP))
//
// A nil f gives a Key that fails every request with
// keyfuncs.ErrMisconfigured (500).
func Adapt(f keyfuncs.Func) Key {
	if f == nil {
		err := fmt.Errorf("%w: Adapt: nil key function", keyfuncs.ErrMisconfigured)
		return func(*gin.Context) (string, error) { return "", err }
	}
	return func(c *gin.Context) (string, error) { return f(c.Request) }
}

// ContextValue returns the key of the value stored in the Gin context
// under key (c.Set(key, value)), typically by an authentication middleware
// that runs before the limiter, converted as keyfuncs.ContextValue
// converts its value: an absent, nil or blank value is an error wrapping
// keyfuncs.ErrMissing (400). A nil key gives a Key that fails every
// request with keyfuncs.ErrMisconfigured (500). Values set with c.Set live
// in the gin.Context, not in the context of c.Request, which
// keyfuncs.ContextValue reads.
func ContextValue(key any) Key {
	if key == nil {
		err := fmt.Errorf("%w: ContextValue: nil key", keyfuncs.ErrMisconfigured)
		return func(*gin.Context) (string, error) { return "", err }
	}
	toKey := adapter.ValueKey(fmt.Sprintf("ratekitgin: c.Get(%#v)", key))
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(key)
		return toKey(v)
	}
}

// User returns the key of the user ID that the app's authentication
// middleware stored with c.Set(key, id), for a limit per user: it is
// ContextValue under a name that documents intent. Unauthenticated
// requests are answered 400; to limit them by address instead, write a
// Key that falls back to PeerIP, prefixing the two kinds of keys.
func User(key any) Key {
	return ContextValue(key)
}
