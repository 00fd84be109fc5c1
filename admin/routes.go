package admin

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"

	"github.com/ratekit/ratekit/core"
)

// listLimiters serves GET limiters: the names given to New.
func (h *Handler) listLimiters(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, struct {
		Limiters []string `json:"limiters"`
	}{h.names})
}

// state serves GET state?limiter=NAME&key=KEY.
func (h *Handler) state(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, key := q.Get("limiter"), q.Get("key")
	lim, p := h.target(name, key)
	if p != nil {
		refuse(w, p)
		return
	}
	st, err := lim.Inspect(r.Context(), key)
	if err != nil {
		h.fail(w, "inspect", name, key, err)
		return
	}
	reply(w, http.StatusOK, stateOf(name, key, st))
}

// An order is the body of POST reset.
type order struct {
	Limiter string `json:"limiter"`
	Key     string `json:"key"`
	Reason  string `json:"reason"`
}

// A grantOrder is the body of POST grant.
type grantOrder struct {
	order
	Amount int `json:"amount"`
}

// reset serves POST reset.
func (h *Handler) reset(w http.ResponseWriter, r *http.Request) {
	var o order
	lim, p := h.read(r, &o, &o)
	if p != nil {
		refuse(w, p)
		return
	}
	found, err := lim.Reset(r.Context(), o.Key, o.Reason)
	if err != nil {
		h.fail(w, "reset", o.Limiter, o.Key, err)
		return
	}
	reply(w, http.StatusOK, struct {
		Limiter string `json:"limiter"`
		KeyHash string `json:"key_hash"`
		Found   bool   `json:"found"`
	}{o.Limiter, core.KeyHash(o.Key), found})
}

// grant serves POST grant. Once the grant is given, the answer is 200
// even if the state that follows cannot be read (its state is then null):
// an operator who saw a failure would grant again, and grants add up.
func (h *Handler) grant(w http.ResponseWriter, r *http.Request) {
	var o grantOrder
	lim, p := h.read(r, &o, &o.order)
	if p == nil && o.Amount < 1 {
		p = errAmount
	}
	if p != nil {
		refuse(w, p)
		return
	}
	if err := lim.Grant(r.Context(), o.Key, o.Amount, o.Reason); err != nil {
		h.fail(w, "grant", o.Limiter, o.Key, err)
		return
	}
	res := struct {
		Limiter string     `json:"limiter"`
		KeyHash string     `json:"key_hash"`
		Amount  int        `json:"amount"`
		State   *stateJSON `json:"state"`
	}{Limiter: o.Limiter, KeyHash: core.KeyHash(o.Key), Amount: o.Amount}
	st, err := lim.Inspect(r.Context(), o.Key)
	if err != nil {
		h.log.Warn("ratekit admin: inspect after grant failed",
			"limiter", o.Limiter, "key_hash", res.KeyHash, "error", err)
	} else {
		s := stateOf(o.Limiter, o.Key, st)
		res.State = &s
	}
	reply(w, http.StatusOK, res)
}

// target returns the limiter named name, or the problem with a request
// for key under it.
func (h *Handler) target(name, key string) (*core.Limiter, *problem) {
	if name == "" {
		return nil, errLimiter
	}
	lim := h.limiters[name]
	switch {
	case lim == nil:
		return nil, errNoLimiter
	case key == "":
		return nil, errKey
	}
	return lim, nil
}

// read decodes the JSON body of a POST into v, whose order is o, and
// returns the limiter it names. The query is not read.
func (h *Handler) read(r *http.Request, v any, o *order) (*core.Limiter, *problem) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, errMediaType
	}
	if r.ContentLength > maxBody {
		return nil, errTooLarge
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		return nil, errBadJSON
	case len(body) > maxBody:
		return nil, errTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var rest json.RawMessage
	if dec.Decode(v) != nil || dec.Decode(&rest) != io.EOF {
		return nil, errBadJSON
	}
	if len(o.Reason) > maxReason {
		return nil, errReason
	}
	return h.target(o.Limiter, o.Key)
}

// stateJSON is the body of GET state: a core.State, by key hash.
type stateJSON struct {
	Limiter  string       `json:"limiter"`
	KeyHash  string       `json:"key_hash"`
	Tracked  bool         `json:"tracked"`
	Decision decisionJSON `json:"decision"`
	Limits   []limitJSON  `json:"limits"`
}

// decisionJSON is a core.Decision, durations in seconds: as in
// core.State, the decision the key's next request of cost 1 would get,
// nothing counted. Remaining is what would be left after that request
// (grants included), as its rate-limit headers would say.
type decisionJSON struct {
	Name       string  `json:"name"`
	Allowed    bool    `json:"allowed"`
	Remaining  int     `json:"remaining"`
	Quota      int     `json:"quota"`
	Window     float64 `json:"window"`
	ResetAfter float64 `json:"reset_after"`
	RetryAfter float64 `json:"retry_after"`
}

// limitJSON is a core.LimitState. Granted reports that a request now
// would be paid from the grant.
type limitJSON struct {
	decisionJSON
	Granted bool      `json:"granted"`
	Grant   grantJSON `json:"grant"`
}

type grantJSON struct {
	Amount    int     `json:"amount"`
	ExpiresIn float64 `json:"expires_in"`
}

func stateOf(limiter, key string, st core.State) stateJSON {
	s := stateJSON{
		Limiter:  limiter,
		KeyHash:  core.KeyHash(key),
		Tracked:  st.Tracked,
		Decision: decisionOf(st.Decision),
		Limits:   make([]limitJSON, len(st.Limits)),
	}
	for i, l := range st.Limits {
		s.Limits[i] = limitJSON{
			decisionJSON: decisionOf(l.Decision),
			Granted:      l.Decision.Granted,
			Grant:        grantJSON{l.Grant.Amount, l.Grant.ExpiresIn.Seconds()},
		}
	}
	return s
}

func decisionOf(d core.Decision) decisionJSON {
	return decisionJSON{
		Name:       d.Name,
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		Quota:      d.Quota,
		Window:     d.Window.Seconds(),
		ResetAfter: d.ResetAfter.Seconds(),
		RetryAfter: d.RetryAfter.Seconds(),
	}
}
