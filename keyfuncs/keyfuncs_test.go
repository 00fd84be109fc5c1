package keyfuncs_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/keyfuncs"
)

func TestHeader(t *testing.T) {
	f := keyfuncs.Header("x-api-key")
	tests := []struct {
		name    string
		values  []string
		want    string
		missing bool
	}{
		{name: "absent", missing: true},
		{name: "empty", values: []string{""}, missing: true},
		{name: "blank", values: []string{"  \t "}, missing: true},
		{name: "value", values: []string{"k-123"}, want: "k-123"},
		{name: "trimmed", values: []string{"  k-123 "}, want: "k-123"},
		{name: "first line wins", values: []string{"a", "b"}, want: "a"},
		{name: "empty first line", values: []string{"", "b"}, missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, v := range tt.values {
				r.Header.Add("X-Api-Key", v)
			}
			got, err := f(r)
			if tt.missing {
				require.ErrorIs(t, err, keyfuncs.ErrMissing)
				assert.Contains(t, err.Error(), "X-Api-Key")
				assert.Empty(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestQuery(t *testing.T) {
	f := keyfuncs.Query("api_key")
	tests := []struct {
		query   string
		want    string
		missing bool
	}{
		{query: "", missing: true},
		{query: "other=1", missing: true},
		{query: "api_key=", missing: true},
		{query: "api_key", missing: true},
		{query: "api_key=+%20", missing: true},
		{query: "api_key=abc", want: "abc"},
		{query: "x=1&api_key=abc&y=2", want: "abc"},
		{query: "api_key=a%2Fb+c", want: "a/b c"},
		{query: "api%5Fkey=escaped-name", want: "escaped-name"},
		{query: "api_key=first&api_key=second", want: "first"},
		{query: "api_key=%zz&api_key=good", want: "good"}, // bad escape skipped, as url.ParseQuery does
		{query: "api_key=a;b&api_key=good", want: "good"},
		{query: "api_keyx=1&xapi_key=2", missing: true},
		{query: "&&api_key=v&&", want: "v"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/p", nil)
			r.URL.RawQuery = tt.query
			got, err := f(r)
			if tt.missing {
				require.ErrorIs(t, err, keyfuncs.ErrMissing)
				assert.Contains(t, err.Error(), "api_key")
				assert.Empty(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			// Same answer as the standard library's parser.
			assert.Equal(t, r.URL.Query().Get("api_key"), got)
		})
	}
}

func TestQueryNoURL(t *testing.T) {
	got, err := keyfuncs.Query("k")(&http.Request{})
	require.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.Empty(t, got)
}

type ctxKey struct{}

type userID string

type stringer struct{ s string }

func (s *stringer) String() string { return s.s }

type account int16

func TestContextValue(t *testing.T) {
	var nilStringer *stringer
	tests := []struct {
		name    string
		value   any
		set     bool
		want    string
		missing bool
	}{
		{name: "absent", missing: true},
		{name: "nil", set: true, value: nil, missing: true},
		{name: "empty string", set: true, value: "", missing: true},
		{name: "blank string", set: true, value: "  ", missing: true},
		{name: "string", set: true, value: "alice", want: "alice"},
		{name: "named string", set: true, value: userID("bob"), want: "bob"},
		{name: "stringer", set: true, value: &stringer{"carol"}, want: "carol"},
		{name: "nil stringer", set: true, value: nilStringer, missing: true},
		{name: "empty stringer", set: true, value: &stringer{""}, missing: true},
		{name: "int", set: true, value: 42, want: "42"},
		{name: "negative int64", set: true, value: int64(-7), want: "-7"},
		{name: "zero", set: true, value: 0, want: "0"},
		{name: "uint64", set: true, value: uint64(18446744073709551615), want: "18446744073709551615"},
		{name: "uint8", set: true, value: uint8(200), want: "200"},
		{name: "named int", set: true, value: account(-3), want: "-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.set {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tt.value))
			}
			for _, f := range []keyfuncs.Func{keyfuncs.ContextValue(ctxKey{}), keyfuncs.User(ctxKey{})} {
				got, err := f(r)
				if tt.missing {
					require.ErrorIs(t, err, keyfuncs.ErrMissing)
					assert.Empty(t, got)
					continue
				}
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
			}
		})
	}
}

func TestContextValueUnsupportedType(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, struct{ ID int }{1}))
	got, err := keyfuncs.ContextValue(ctxKey{})(r)
	require.Error(t, err)
	assert.NotErrorIs(t, err, keyfuncs.ErrMissing)
	assert.Contains(t, err.Error(), "unsupported type")
	assert.Empty(t, got)
}

func TestMisuseFailsRequestsInsteadOfPanicking(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for name, f := range map[string]keyfuncs.Func{
		"Header":       keyfuncs.Header(""),
		"Query":        keyfuncs.Query(""),
		"ContextValue": keyfuncs.ContextValue(nil),
		"User":         keyfuncs.User(nil),
		"First":        keyfuncs.First(keyfuncs.Constant("a"), nil),
		"Join":         keyfuncs.Join(nil),
	} {
		key, err := f(r)
		assert.Empty(t, key, name)
		assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured, name)
		assert.NotErrorIs(t, err, keyfuncs.ErrMissing, name)
	}
}

func TestRoute(t *testing.T) {
	t.Run("without pattern", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodPost, "/items/42?x=1", nil)
		got, err := keyfuncs.Route()(r)
		require.NoError(t, err)
		assert.Equal(t, "POST /items/42", got)
	})
	t.Run("empty path", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.Path = ""
		got, err := keyfuncs.Route()(r)
		require.NoError(t, err)
		assert.Equal(t, "GET /", got)
	})
	t.Run("no URL", func(t *testing.T) {
		got, err := keyfuncs.Route()(&http.Request{Method: http.MethodGet})
		require.ErrorIs(t, err, keyfuncs.ErrMissing)
		assert.Empty(t, got)
	})

	// Through a real ServeMux, so r.Pattern is set by the standard library.
	tests := []struct {
		pattern, method, target, want string
	}{
		{"/items/{id}", http.MethodGet, "/items/1", "GET /items/{id}"},
		{"/items/{id}", http.MethodDelete, "/items/2", "DELETE /items/{id}"},
		{"GET /users/{id}", http.MethodGet, "/users/7", "GET /users/{id}"},
		{"GET /users/{id}", http.MethodHead, "/users/7", "HEAD /users/{id}"},
		{"POST  example.com/up", http.MethodPost, "http://example.com/up", "POST example.com/up"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.method, func(t *testing.T) {
			var got string
			var err error
			mux := http.NewServeMux()
			mux.HandleFunc(tt.pattern, func(_ http.ResponseWriter, r *http.Request) {
				got, err = keyfuncs.Route()(r)
			})
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tt.method, tt.target, nil))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestConstant(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	got, err := keyfuncs.Constant("all")(r)
	require.NoError(t, err)
	assert.Equal(t, "all", got)

	got, err = keyfuncs.Constant("")(r)
	require.NoError(t, err)
	assert.Equal(t, "global", got)
}

func fixed(key string, err error) keyfuncs.Func {
	return func(*http.Request) (string, error) { return key, err }
}

func TestFirst(t *testing.T) {
	errBoom := errors.New("boom")
	missing := fixed("", keyfuncs.ErrMissing)
	tests := []struct {
		name    string
		fs      []keyfuncs.Func
		want    string
		wantErr error
	}{
		{name: "first present", fs: []keyfuncs.Func{fixed("alice", nil), fixed("192.0.2.1", nil)}, want: "0:alice"},
		{name: "falls through missing", fs: []keyfuncs.Func{missing, fixed("192.0.2.1", nil)}, want: "1:192.0.2.1"},
		{name: "falls through wrapped missing", fs: []keyfuncs.Func{fixed("", errors.Join(errors.New("x"), keyfuncs.ErrMissing)), missing, fixed("k", nil)}, want: "2:k"},
		{name: "empty key treated as missing", fs: []keyfuncs.Func{fixed("", nil), fixed("k", nil)}, want: "1:k"},
		{name: "other error returned", fs: []keyfuncs.Func{missing, fixed("", errBoom), fixed("k", nil)}, wantErr: errBoom},
		{name: "all missing", fs: []keyfuncs.Func{missing, missing}, wantErr: keyfuncs.ErrMissing},
		{name: "none", fs: nil, wantErr: keyfuncs.ErrMissing},
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyfuncs.First(tt.fs...)(r)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				if tt.wantErr == errBoom {
					assert.NotErrorIs(t, err, keyfuncs.ErrMissing)
				}
				assert.Empty(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestFirstSeparatesUserFromIP(t *testing.T) {
	ip, err := keyfuncs.IP()
	require.NoError(t, err)
	f := keyfuncs.First(keyfuncs.User(ctxKey{}), ip)

	// A user whose ID looks like an IP address...
	authed := httptest.NewRequest(http.MethodGet, "/", nil)
	authed.RemoteAddr = "198.51.100.1:1234"
	authed = authed.WithContext(context.WithValue(authed.Context(), ctxKey{}, "192.0.2.1"))
	// ...and an anonymous client with that address.
	anon := httptest.NewRequest(http.MethodGet, "/", nil)
	anon.RemoteAddr = "192.0.2.1:1234"

	k1, err := f(authed)
	require.NoError(t, err)
	k2, err := f(anon)
	require.NoError(t, err)
	assert.Equal(t, "0:192.0.2.1", k1)
	assert.Equal(t, "1:192.0.2.1", k2)
	assert.NotEqual(t, k1, k2)
}

func TestJoin(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)

	got, err := keyfuncs.Join(fixed("GET /a", nil), fixed("192.0.2.1", nil))(r)
	require.NoError(t, err)
	assert.Equal(t, "6:GET /a|9:192.0.2.1", got)

	got, err = keyfuncs.Join(fixed("abc", nil))(r)
	require.NoError(t, err)
	assert.Equal(t, "3:abc", got)

	long := strings.Repeat("x", 1234)
	got, err = keyfuncs.Join(fixed(long, nil), fixed("y", nil))(r)
	require.NoError(t, err)
	assert.Equal(t, "1234:"+long+"|1:y", got)

	// More parts than the stack buffer holds.
	var many []keyfuncs.Func
	for range 10 {
		many = append(many, fixed("p", nil))
	}
	got, err = keyfuncs.Join(many...)(r)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("1:p|", 9)+"1:p", got)
}

func TestJoinUnambiguous(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	sets := [][]string{
		{"a", "b:c"},
		{"a:b", "c"},
		{"a", "b|c"},
		{"a|b", "c"},
		{"1:a", "b"},
		{"1:a|1:b"},
		{"a", "b", "c"},
		{"a", "1:b|1:c"},
		{"ab", "c"},
		{"a", "bc"},
		{"abc"},
	}
	seen := map[string][]string{}
	for _, parts := range sets {
		var fs []keyfuncs.Func
		for _, p := range parts {
			fs = append(fs, fixed(p, nil))
		}
		k, err := keyfuncs.Join(fs...)(r)
		require.NoError(t, err)
		prev, dup := seen[k]
		require.Falsef(t, dup, "%q and %q both give key %q", prev, parts, k)
		seen[k] = parts
	}
}

func TestJoinErrors(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	errBoom := errors.New("boom")

	got, err := keyfuncs.Join(fixed("a", nil), fixed("", errBoom))(r)
	require.ErrorIs(t, err, errBoom)
	assert.Empty(t, got)

	got, err = keyfuncs.Join(fixed("a", nil), keyfuncs.Header("X-Missing"))(r)
	require.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.Empty(t, got)

	got, err = keyfuncs.Join(fixed("a", nil), fixed("", nil))(r)
	require.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.Empty(t, got)

	got, err = keyfuncs.Join()(r)
	require.ErrorIs(t, err, keyfuncs.ErrMissing)
	assert.Empty(t, got)
}

func TestFirstAndJoinAllocations(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	ip, err := keyfuncs.IP()
	require.NoError(t, err)
	join := keyfuncs.Join(keyfuncs.Constant("route"), ip)
	first := keyfuncs.First(keyfuncs.Header("X-Missing"), ip)
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { _, _ = join(r) }), 1.0)
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { _, _ = first(r) }), 1.0)
	missing := keyfuncs.Header("X-Missing")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = missing(r) }))
}

func TestPeerIPIgnoresProxyHeaders(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[2001:db8:1:2:3::9]:5555"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	key, err := keyfuncs.PeerIP(r)
	require.NoError(t, err)
	require.Equal(t, "2001:db8:1:2::/64", key)
}
