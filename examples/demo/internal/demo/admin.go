package demo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
)

// This file serves the operator's controls (package admin) on a listener
// of their own, with -admin ADDR, behind a bearer token.

// adminPrefix is where the admin handler is mounted on its listener.
const adminPrefix = "/admin/ratekit/"

// adminTokenEnv is the environment variable that may hold the admin token.
const adminTokenEnv = "RATEKIT_ADMIN_TOKEN"

// parseAdmin validates -admin and -admin-token (or $RATEKIT_ADMIN_TOKEN)
// into c. Without a token the demo makes one at start, but only for a
// listener on a loopback address: one that others can reach needs a token
// its operator chose.
func (c *config) parseAdmin(addr, token string, set map[string]bool, getenv func(string) string) error {
	if addr == "" {
		if set["admin-token"] {
			return cli.Usagef("-admin-token applies only with -admin")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return cli.Usagef("-admin %q: %v (want host:port, such as 127.0.0.1:9091)", addr, err)
	}
	if port == "" {
		return cli.Usagef("-admin %q: no port (want host:port, such as 127.0.0.1:9091)", addr)
	}
	if addr == c.addr && port != "0" {
		return cli.Usagef("-admin %q: must differ from -addr (the admin listener is a separate one)", addr)
	}
	switch {
	case set["admin-token"]:
		if token == "" {
			return cli.Usagef("-admin-token: must not be empty")
		}
	default:
		token = getenv(adminTokenEnv)
	}
	if token != "" {
		if err := checkToken(token); err != nil {
			return err
		}
	} else if !isLoopback(host) {
		return cli.Usagef("-admin %q is not a loopback address: anyone who reaches it could reset any client's limits, so give a token with -admin-token or $%s (one is generated only for a loopback address, such as 127.0.0.1, ::1 or localhost)", addr, adminTokenEnv)
	}
	c.admin, c.adminToken = addr, token
	return nil
}

// checkToken reports whether token can be sent as a bearer token: printable
// ASCII without spaces, at most 1 KiB.
func checkToken(token string) error {
	if len(token) > 1024 {
		return cli.Usagef("-admin-token: longer than 1024 bytes")
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return cli.Usagef("-admin-token (or $%s): only printable ASCII without spaces, as an Authorization header carries it", adminTokenEnv)
		}
	}
	return nil
}

// isLoopback reports whether host, the host of a listening address, is
// a loopback address only: an IP literal of a loopback address, or
// localhost. Every other name, and the empty host (every interface), is
// taken to be reachable from elsewhere.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// adminHandler returns the admin handler, behind the bearer token, mounted
// at adminPrefix, over the limiters the flags built: the flag-built limit
// of GET / (without -config) and the login limit, named as their limits
// are. The rules of -config are not exposed.
func (rt *Routes) adminHandler(mainName, token string, log *slog.Logger) (http.Handler, error) {
	limiters := map[string]*core.Limiter{loginLimit.Name: rt.Login}
	if rt.Main != nil {
		limiters[mainName] = rt.Main
	}
	h, err := admin.New(limiters, admin.WithLogger(log))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(adminPrefix, h)
	return requireBearer(token, mux), nil
}

// requireBearer answers 401 to every request without the header
// "Authorization: Bearer TOKEN". The tokens are compared by their SHA-256
// hashes, in constant time, so that neither the time taken nor a length
// tells how much of a guess was right.
func requireBearer(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sum := sha256.Sum256([]byte(got))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			hd := w.Header()
			hd.Set("WWW-Authenticate", `Bearer realm="ratekit admin"`)
			hd.Set("Content-Type", "application/json")
			hd.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"a valid bearer token is required"}`+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminServer is the admin listener and its server; nil when -admin is
// off, and then its methods do nothing.
type adminServer struct {
	srv   *http.Server
	ln    net.Listener
	ended chan struct{} // closed when the server ends; nil until serve
	err   error         // why it ended, once ended is closed
}

// listenAdmin opens the admin listener, if -admin is set, generating the
// token if none was given. It serves nothing until serve is called.
func listenAdmin(ctx context.Context, cfg *config, rt *Routes, log *slog.Logger) (*adminServer, error) {
	if cfg.admin == "" {
		return nil, nil
	}
	if cfg.adminToken == "" {
		cfg.adminToken = rand.Text() // 26 base-32 digits: 130 random bits
		cfg.adminTokenMade = true
	}
	h, err := rt.adminHandler(cfg.limit.Name, cfg.adminToken, log)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.admin)
	if err != nil {
		return nil, fmt.Errorf("-admin: %w", err)
	}
	return &adminServer{srv: DefaultTimeouts.Server(h), ln: ln}, nil
}

// serve serves the admin listener in a goroutine and says to stderr where
// it is, and the generated token, if any, with a curl line that uses it.
func (a *adminServer) serve(cfg *config, stderr io.Writer) error {
	if a == nil {
		return nil
	}
	a.ended = make(chan struct{})
	go func() {
		a.err = a.srv.Serve(a.ln)
		close(a.ended)
	}()
	base := "http://" + a.ln.Addr().String() + adminPrefix
	if _, err := fmt.Fprintf(stderr, "demo: admin listening on %s (operator controls; bearer token required)\n", base); err != nil {
		return err
	}
	if !cfg.adminTokenMade {
		return nil
	}
	_, err := fmt.Fprintf(stderr, "demo: admin token (generated; choose one with -admin-token or $%s): %s\n"+
		"demo:   curl -H 'Authorization: Bearer %s' %slimiters\n", adminTokenEnv, cfg.adminToken, cfg.adminToken, base)
	return err
}

// done returns a channel closed when the admin server ends (its error is
// then failure()); nil, which no select receives from, when it is off.
func (a *adminServer) done() <-chan struct{} {
	if a == nil {
		return nil
	}
	return a.ended
}

// failure returns why the admin server ended, once done is closed.
func (a *adminServer) failure() error {
	return fmt.Errorf("admin listener: %w", a.err)
}

// stop closes the admin listener and connections at once, and waits for
// the server to end.
func (a *adminServer) stop() {
	if a == nil {
		return
	}
	_ = a.srv.Close()
	_ = a.ln.Close()
	if a.ended != nil {
		<-a.ended
	}
}

// shutdown stops the admin server gracefully within ctx, at once after
// that, and waits for it to end.
func (a *adminServer) shutdown(ctx context.Context) error {
	if a == nil || a.ended == nil {
		a.stop()
		return nil
	}
	err := a.srv.Shutdown(ctx)
	_ = a.ln.Close()
	<-a.ended
	if err != nil {
		_ = a.srv.Close()
		return fmt.Errorf("admin shutdown: %w", err)
	}
	return nil
}
