package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/ratekit/ratekit/core"
)

// Limits on what a request may carry.
const (
	maxName   = 64       // bytes in a limiter's name
	maxBody   = 64 << 10 // bytes in a POST body
	maxReason = 500      // bytes in a reason
)

// An Option configures the handler returned by New.
type Option func(*config)

type config struct {
	log *slog.Logger
}

// WithLogger sets the logger of the requests that fail because the
// limiter's store or plan function failed (default slog.Default()). The
// limiter itself logs every reset and grant, with the operator's reason.
func WithLogger(log *slog.Logger) Option {
	return func(c *config) { c.log = log }
}

// A Handler serves the operator's controls over a fixed set of named
// limiters; see the package documentation for its routes. It is safe for
// concurrent use.
type Handler struct {
	limiters map[string]*core.Limiter
	names    []string // sorted
	log      *slog.Logger
}

// New returns the handler of the operator's controls over the named
// limiters. A name is what requests call a limiter by: 1 to 64 letters,
// digits and "-_.:/". New returns an error, never panics, when the map is
// empty, a limiter is nil, a name is not valid, or an option is nil.
func New(limiters map[string]*core.Limiter, opts ...Option) (*Handler, error) {
	if len(limiters) == 0 {
		return nil, errors.New("ratekit admin: no limiters")
	}
	cfg := config{log: slog.Default()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("ratekit admin: nil option")
		}
		o(&cfg)
	}
	if cfg.log == nil {
		return nil, errors.New("ratekit admin: WithLogger(nil)")
	}
	h := &Handler{limiters: make(map[string]*core.Limiter, len(limiters)), log: cfg.log}
	for name, lim := range limiters {
		if err := checkName(name); err != nil {
			return nil, err
		}
		if lim == nil {
			return nil, fmt.Errorf("ratekit admin: limiter %q is nil", name)
		}
		h.limiters[name] = lim
		h.names = append(h.names, name)
	}
	sort.Strings(h.names)
	return h, nil
}

func checkName(name string) error {
	if name == "" {
		return errors.New("ratekit admin: empty limiter name")
	}
	if len(name) > maxName {
		return fmt.Errorf("ratekit admin: limiter name %.20q... is longer than %d bytes", name, maxName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_.:/", c) >= 0:
		default:
			return fmt.Errorf("ratekit admin: limiter name %q: character %q not allowed (use letters, digits and -_.:/)", name, c)
		}
	}
	return nil
}

// A route serves the requests whose path ends in its name.
type route struct {
	methods []string
	serve   func(*Handler, http.ResponseWriter, *http.Request)
}

var routes = map[string]route{
	"limiters": {[]string{http.MethodGet, http.MethodHead}, (*Handler).listLimiters},
	"state":    {[]string{http.MethodGet, http.MethodHead}, (*Handler).state},
	"reset":    {[]string{http.MethodPost}, (*Handler).reset},
	"grant":    {[]string{http.MethodPost}, (*Handler).grant},
}

// ServeHTTP serves the route named by the last element of the request's
// path, whatever comes before it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	rt, ok := routes[p[strings.LastIndexByte(p, '/')+1:]]
	switch {
	case !ok:
		refuse(w, errNoRoute)
	case !slices.Contains(rt.methods, r.Method):
		w.Header().Set("Allow", strings.Join(rt.methods, ", "))
		refuse(w, errMethod)
	default:
		rt.serve(h, w, r)
	}
}

// A problem is a refusal: its status and the fixed words of its body,
// which never repeat what the client sent.
type problem struct {
	status int
	text   string
}

var (
	errNoRoute   = &problem{http.StatusNotFound, "no such route"}
	errNoLimiter = &problem{http.StatusNotFound, "no such limiter"}
	errMethod    = &problem{http.StatusMethodNotAllowed, "method not allowed"}
	errMediaType = &problem{http.StatusUnsupportedMediaType, "Content-Type must be application/json"}
	errTooLarge  = &problem{http.StatusRequestEntityTooLarge, "the body must be at most 64 KiB"}
	errBadJSON   = &problem{http.StatusBadRequest, "the body must be one JSON object of the route's fields only"}
	errLimiter   = &problem{http.StatusBadRequest, "limiter is required"}
	errKey       = &problem{http.StatusBadRequest, "key is required"}
	errKeyless   = &problem{http.StatusBadRequest, "the key names no client the limiter can limit"}
	errReason    = &problem{http.StatusBadRequest, "reason must be at most 500 bytes"}
	errAmount    = &problem{http.StatusBadRequest, "amount must be at least 1 and within the limit's capacity"}
	errPlan      = &problem{http.StatusInternalServerError, "the limiter's plan for the key could not be found"}
	errStore     = &problem{http.StatusServiceUnavailable, "the limiter's store failed; try again"}
)

// problemOf returns the refusal of an error of a limiter's Inspect, Reset
// or Grant.
func problemOf(err error) *problem {
	switch {
	case errors.Is(err, core.ErrMissingKey): // checked before ErrPlan: a plan may wrap it
		return errKeyless
	case errors.Is(err, core.ErrPlan):
		return errPlan
	case errors.Is(err, core.ErrInvalidGrant):
		return errAmount
	default:
		return errStore
	}
}

// fail answers a request on which the limiter failed, and logs the
// failures that are not the client's: those of the store and the plan.
func (h *Handler) fail(w http.ResponseWriter, action, limiter, key string, err error) {
	p := problemOf(err)
	if p.status >= 500 {
		h.log.Warn("ratekit admin: "+action+" failed",
			"limiter", limiter, "key_hash", core.KeyHash(key), "status", p.status, "error", err)
	}
	refuse(w, p)
}

func refuse(w http.ResponseWriter, p *problem) {
	if p.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	reply(w, p.status, struct {
		Error string `json:"error"`
	}{p.text})
}

// reply writes body as JSON. No response may be cached: states change.
func reply(w http.ResponseWriter, status int, body any) {
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body) // the client is gone, or HEAD
}
