package fastport

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/ratekit/ratekit/adapter"
	"github.com/ratekit/ratekit/keyfuncs"
)

// IP returns the key function of keyfuncs.IP over the request context C,
// read by F: the TCP peer, unless it is one of the trusted proxies, whose
// proxy header is then walked from the right. Fiber's ProxyHeader plays
// no part.
func IP[F Framework[C, Q], C any, Q RequestHeader](opts ...keyfuncs.IPOption) (func(C) (string, error), error) {
	ci, err := adapter.NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(c C) (string, error) {
		var f F
		return ci.KeyFrom(remoteAddr(f.Peer(c)), headers[Q]{f.Header(c)})
	}, nil
}

// A Getter reads a request header field, as Fiber's c.Get.
type Getter interface {
	Get(key string, defaultValue ...string) string
}

// Header returns the key function of the request header field name, as
// keyfuncs.Header takes it (trimmed; 400 when absent or blank), copied.
func Header[C Getter](name string) func(C) (string, error) {
	toKey := adapter.HeaderKey(name)
	return func(c C) (string, error) {
		k, err := toKey(c.Get(name))
		return strings.Clone(k), err
	}
}

// ContextValue returns the key function of the value stored with
// c.Locals(key, v), converted as adapter.ValueKey says and copied; the
// errors name the adapter's package pkg. A nil key gives a function that
// fails every request with keyfuncs.ErrMisconfigured.
func ContextValue[C Reader](pkg string, key any) func(C) (string, error) {
	if key == nil {
		err := fmt.Errorf("%w: ContextValue: nil key", keyfuncs.ErrMisconfigured)
		return func(C) (string, error) { return "", err }
	}
	toKey := adapter.ValueKey(fmt.Sprintf("%s: c.Locals(%#v)", pkg, key))
	return func(c C) (string, error) {
		k, err := toKey(c.Locals(key))
		return strings.Clone(k), err
	}
}

// An AppReader is a request context that tells its app, of type A, and
// the client address that the app finds, as Fiber's c.App() and c.IP().
type AppReader[A comparable] interface {
	App() A
	IP() string
}

// ClientIP returns the key function of Fiber's own client address, c.IP(),
// made canonical as PeerKey's (400 if it is no address), for app, which
// the adapter of package pkg has checked (Fiber's proxy settings cannot
// change after fiber.New, so that check holds for app's life): a request
// served by another app fails with an error wrapping
// keyfuncs.ErrMisconfigured (500).
func ClientIP[C AppReader[A], A comparable](pkg string, app A) func(C) (string, error) {
	errOtherApp := fmt.Errorf("%s: ClientIP: %w: the request is served by another app than the one ClientIP checked",
		pkg, keyfuncs.ErrMisconfigured)
	return func(c C) (string, error) {
		if c.App() != app {
			return "", errOtherApp
		}
		k, err := peer.KeyFrom(c.IP(), nil) // an address with or without port
		return strings.Clone(k), err
	}
}

// Routes tells, of Fiber's route type R, the routes proper from those
// that Fiber registers at their prefix for the middleware of app.Use and
// groups, whose pattern would count every route below it as one. Only R's
// unexported field use tells them apart; reading it with reflect does not
// allocate.
type Routes[R any] struct{ use, path int }

// NewRoutes returns the Routes of R, whose every Pattern is "" if R has
// no field use or Path (another version of Fiber).
func NewRoutes[R any]() Routes[R] {
	t := reflect.TypeFor[R]()
	use, ok := t.FieldByName("use")
	path, pok := t.FieldByName("Path")
	if !ok || !pok || use.Type.Kind() != reflect.Bool || path.Type.Kind() != reflect.String ||
		len(use.Index) != 1 || len(path.Index) != 1 {
		return Routes[R]{-1, -1}
	}
	return Routes[R]{use.Index[0], path.Index[0]}
}

// Pattern returns the pattern of rt, the app's memory, or "" for a route
// of app.Use or a group.
func (rs Routes[R]) Pattern(rt *R) string {
	if rs.use < 0 || rt == nil {
		return ""
	}
	if v := reflect.ValueOf(rt).Elem(); !v.Field(rs.use).Bool() {
		return v.Field(rs.path).String()
	}
	return ""
}
