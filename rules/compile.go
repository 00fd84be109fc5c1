package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/internal/keyval"
	"github.com/ratekit/ratekit/keyfuncs"
)

// A set is one compiled Config. It is immutable once built.
type set struct {
	cfg    Config
	groups []*group
	rules  []*rule // the rules with a limit, in config order
}

// A group is the sibling descriptors with one key and one match: the
// descriptor whose value equals the request's wins over one whose
// wildcard value matches it (the first in file order, as in Envoy), which
// wins over the one without a value.
type group struct {
	key   string
	fn    KeyFunc // nil for generic_key, which matches every request
	match *matcher
	exact map[string]*node
	wild  []*node // wildcard values, in file order
	any   *node
}

type node struct {
	value   string     // the descriptor's value: exact, or a wildcard pattern
	parts   []string   // a wildcard pattern split at its stars
	dynamic bool       // the request's value goes into the key (no exact or shared value)
	rule    *rule      // nil: no limit here (grouping, or unlimited)
	rl      *RateLimit // the descriptor's rate limit as configured, for Lookup
	shadow  bool       // shadow_mode or quota_mode, or the engine's WithShadow
	groups  []*group
}

// wildMatch reports whether v matches a wildcard pattern split at its
// stars, each star standing for any run of characters, empty included.
func wildMatch(parts []string, v string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}

type rule struct {
	lim      *core.Limiter // nil for an unlimited rule that only replaces others
	name     string        // the config's name, for replaces
	replaces []string
	limit    core.Limit // the rule's limit; its Name for Matches and metrics

	// While the config compiles: where the rule is, and its limiter's
	// options. Its name and limiter wait for every identity to be known;
	// both are cleared once the limiter is built.
	id   identity
	opts []core.Option
}

// collect returns the checks of every rule that matches r, in w's buffer.
func (s *set) collect(w *walker, r Request) ([]core.Check, error) {
	if len(s.groups) == 0 {
		return nil, nil
	}
	w.r, w.matched, w.cascade = r, w.mbuf[:0], s.cfg.Cascade
	var vals [8]string
	if _, err := w.walk(s.groups, vals[:0]); err != nil {
		return nil, err
	}
	return w.checks(), nil
}

// A walker collects the rules that match a request.
type walker struct {
	r        Request
	path     string // cleaned Path, once asked for
	escaped  string // cleaned EscapedPath, once asked for
	have     uint8  // which of path (1) and escaped (2) are known
	replaces bool   // a matched rule replaces others
	cascade  bool   // every rule on the way down applies (Config.Cascade)
	matched  []matched
	mbuf     [8]matched
	cbuf     [8]core.Check
}

type matched struct {
	rule *rule
	key  string
}

// reset clears w for reuse, dropping its references.
func (w *walker) reset() { *w = walker{} }

func (w *walker) cleanPath() string {
	if w.have&1 == 0 {
		w.path, w.have = cleanPath(w.r.Path()), w.have|1
	}
	return w.path
}

// cleanEscapedPath returns the cleaned EscapedPath, "" if there is none.
func (w *walker) cleanEscapedPath() string {
	if w.have&2 == 0 {
		if p := w.r.EscapedPath(); p != "" {
			w.escaped = cleanPath(p)
		}
		w.have |= 2
	}
	return w.escaped
}

// walk collects the rules of the descriptors the request reaches below
// groups, and reports whether it reached any. A request's descriptor ends
// at the deepest descriptor it reaches on each path down: that
// descriptor's rule applies, and those of its ancestors only with Cascade.
func (w *walker) walk(groups []*group, vals []string) (bool, error) {
	reached := false
	for _, g := range groups {
		if g.match != nil && !g.match.matches(w) {
			continue
		}
		n, v, err := g.pick(w.r)
		if err != nil {
			return false, err
		}
		if n == nil {
			continue
		}
		reached = true
		vs := vals
		if n.dynamic {
			vs = append(vs, v)
		}
		if w.cascade {
			w.add(n.rule, vs)
		}
		deeper := false
		if len(n.groups) > 0 {
			if deeper, err = w.walk(n.groups, vs); err != nil {
				return false, err
			}
		}
		if !w.cascade && !deeper {
			w.add(n.rule, vs)
		}
	}
	return reached, nil
}

// add records that rule r applies, with the values along its path.
func (w *walker) add(r *rule, vals []string) {
	if r == nil {
		return
	}
	m := matched{rule: r}
	if r.lim != nil {
		m.key = joinKey(vals)
	}
	w.matched = append(w.matched, m)
	w.replaces = w.replaces || len(r.replaces) > 0
}

// checks returns the checks of the matched rules, but for those another
// matched rule replaces.
func (w *walker) checks() []core.Check {
	cs := w.cbuf[:0]
	for _, m := range w.matched {
		if m.rule.lim == nil || w.replaces && w.replaced(m.rule.name) {
			continue
		}
		cs = append(cs, core.Check{Limiter: m.rule.lim, Key: m.key})
	}
	return cs
}

func (w *walker) replaced(name string) bool {
	if name == "" {
		return false
	}
	for _, m := range w.matched {
		if slices.Contains(m.rule.replaces, name) {
			return true
		}
	}
	return false
}

// pick returns the group's node that matches r, and r's value for the key.
func (g *group) pick(r Request) (*node, string, error) {
	if g.fn == nil {
		return g.any, "", nil
	}
	v, err := g.fn(r)
	if err != nil {
		if errors.Is(err, keyfuncs.ErrMissing) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("rules: descriptor key %q: %w", g.key, err)
	}
	if v == "" {
		return nil, "", nil
	}
	return g.choose(v), v, nil
}

// choose returns the group's descriptor for value v: the one with value v,
// else the first wildcard that matches v, else the one without a value.
func (g *group) choose(v string) *node {
	if n := g.exact[v]; n != nil {
		return n
	}
	for _, n := range g.wild {
		if wildMatch(n.parts, v) {
			return n
		}
	}
	return g.any
}

// cleanPath is path.Clean for request paths: rooted, without a trailing
// slash, so that "//login/" and "/a/../login" match "/login".
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return path.Clean(p)
}

// A matcher is a compiled Match.
type matcher struct {
	methods []string
	path    bool     // the path is constrained
	segs    []string // the pattern's segments; "*" matches one segment
	rest    bool     // the pattern ended in "/*": any further segments
	spec    string   // canonical text, part of the rule identity
}

// matches reports whether the walker's request matches. A method GET also
// matches HEAD, which routers serve with the GET handler. The path matches
// if either its unescaped or its escaped form does, segment by segment
// (escaped segments compared unescaped), since routers route by one or the
// other: "/users/1%2Fx/export" is three segments to http.ServeMux and
// Chi, four to Gin.
func (m *matcher) matches(w *walker) bool {
	if len(m.methods) > 0 {
		meth := w.r.Method()
		if !slices.Contains(m.methods, meth) && !(meth == "HEAD" && slices.Contains(m.methods, "GET")) {
			return false
		}
	}
	if !m.path {
		return true
	}
	if m.matchPath(w.cleanPath(), false) {
		return true
	}
	p := w.cleanEscapedPath()
	return p != "" && m.matchPath(p, true)
}

// matchPath matches a cleaned path; escaped paths have their segments
// unescaped before they are compared.
func (m *matcher) matchPath(p string, escaped bool) bool {
	if len(m.segs) == 0 {
		return m.rest || p == "/"
	}
	for _, s := range m.segs {
		if len(p) < 2 {
			return false
		}
		p = p[1:] // the slash
		i := strings.IndexByte(p, '/')
		if i < 0 {
			i = len(p)
		}
		if s != "*" {
			seg := p[:i]
			if escaped && strings.IndexByte(seg, '%') >= 0 {
				u, err := url.PathUnescape(seg)
				if err != nil {
					return false
				}
				seg = u
			}
			if seg != s {
				return false
			}
		}
		p = p[i:]
	}
	return p == "" || m.rest
}

// compileMatch compiles m; nil when it matches every request, or a
// message saying what is wrong.
func compileMatch(m *Match) (*matcher, string) {
	c := &matcher{}
	for _, meth := range m.Methods {
		meth = strings.ToUpper(strings.TrimSpace(meth))
		if meth == "" || strings.ContainsFunc(meth, func(r rune) bool { return r < 'A' || r > 'Z' }) {
			return nil, fmt.Sprintf("method %s is not a request method", quote(meth))
		}
		if !slices.Contains(c.methods, meth) {
			c.methods = append(c.methods, meth)
		}
	}
	sort.Strings(c.methods)
	if p := m.Path; p != "" {
		if p[0] != '/' {
			return nil, fmt.Sprintf("path %s must start with /", quote(p))
		}
		c.path = true
		if p == "/*" || strings.HasSuffix(p, "/*") {
			c.rest, p = true, strings.TrimSuffix(p, "/*")
		}
		if p != "" && p != "/" {
			if cleanPath(p) != p {
				return nil, fmt.Sprintf("path %s is not clean (no empty, . or .. segments, no trailing slash)", quote(m.Path))
			}
			c.segs = strings.Split(p[1:], "/")
			for _, s := range c.segs {
				if strings.Contains(s, "*") && s != "*" {
					return nil, fmt.Sprintf("path %s: * must be a whole segment", quote(m.Path))
				}
			}
		}
	}
	if len(c.methods) == 0 && !c.path {
		return nil, ""
	}
	c.spec = strings.Join(c.methods, ",") + " " + m.Path
	return c, ""
}

// units are the rate-limit units of the Envoy schema, with Envoy's
// lengths for a month (30 days) and a year (365 days).
var units = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

// unitNames lists the units for error messages.
const unitNames = "second, minute, hour, day, week, month or year"

// compiler builds a set from a Config, collecting every error.
type compiler struct {
	e       *Engine
	src     string
	errs    []error
	names   map[string]string // rate-limit name → path, for duplicates and replaces
	rules   []*rule
	ruleAt  []string // paths of rules, parallel to rules
	limited []*rule  // the rules with a limiter, once built
	lines   []int
}

// maxErrors caps the errors Load reports for one config, as
// rulesfile.Parse does for a file: past it, one more error says there are
// too many, and the rest are dropped.
const maxErrors = 100

func (c *compiler) fail(line int, path, format string, args ...any) {
	switch {
	case len(c.errs) > maxErrors:
		return
	case len(c.errs) == maxErrors:
		c.errs = append(c.errs, &Error{Source: c.src, Line: line, Path: path, Msg: "too many errors"})
		return
	}
	c.errs = append(c.errs, &Error{Source: c.src, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// maxQuoted is the number of runes of a value that error messages quote:
// a longer value is cut, and marked so by "...".
const maxQuoted = 40

// quote quotes s for an error message, cut to maxQuoted runes, so that a
// huge value in a config cannot make its errors huge.
func quote(s string) string { return strconv.Quote(shorten(s)) }

// shorten returns s cut to maxQuoted runes, followed by "..." if cut.
func shorten(s string) string {
	n := 0
	for i := range s {
		if n == maxQuoted {
			return s[:i] + "..."
		}
		n++
	}
	return s
}

// shortPath returns the path of an element for an error message: the
// end of a long one, which names the element, after "...".
func shortPath(p string) string {
	const max = 200
	if len(p) <= max {
		return p
	}
	tail := p[len(p)-max:]
	if i := strings.IndexByte(tail, '.'); i >= 0 {
		tail = tail[i:] // start at an element
	}
	return "..." + tail
}

func (e *Engine) compile(cfg Config) (*set, error) {
	c := &compiler{e: e, src: cfg.Source, names: map[string]string{}}
	if strings.TrimSpace(cfg.Domain) == "" {
		c.fail(cfg.Line, "domain", "domain is required")
	}
	s := &set{cfg: cfg}
	s.groups = c.groups(cfg.Descriptors, "descriptors", identity{strconv.Quote(cfg.Domain), cfg.Domain, plainPart(cfg.Domain)})
	c.limiters()
	for i, r := range c.rules {
		for _, name := range r.replaces {
			switch {
			case name == r.name:
				c.fail(c.lines[i], c.ruleAt[i]+".replaces", "a limit cannot replace itself (%s)", quote(name))
			case c.names[name] == "":
				c.fail(c.lines[i], c.ruleAt[i]+".replaces", "no rate limit is named %s", quote(name))
			}
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s.rules = c.limited
	return s, nil
}

// groups compiles sibling descriptors; at is their path in the config and
// id the identity of their parent.
func (c *compiler) groups(ds []Descriptor, at string, id identity) []*group {
	var gs []*group
	byKey := map[string]*group{}
	for i := range ds {
		d := &ds[i]
		dat := fmt.Sprintf("%s[%d]", at, i)
		fn, ok := c.keyFunc(d, dat)
		if !ok {
			continue
		}
		var m *matcher
		spec := ""
		if d.Match != nil {
			var msg string
			m, msg = compileMatch(d.Match)
			if msg != "" {
				c.fail(lineOr(d.Match.Line, d.Line), dat+".match", "%s", msg)
				continue
			}
			if m != nil {
				spec = m.spec
			}
		}
		gk := d.Key + "\x00" + spec
		if fn == nil { // generic_key: each value is a group of its own
			gk += "\x00" + d.Value
		}
		g := byKey[gk]
		if g == nil {
			g = &group{key: d.Key, fn: fn, match: m, exact: map[string]*node{}}
			byKey[gk] = g
			gs = append(gs, g)
		}
		nid := id.child(d, m)
		n := &node{value: d.Value, dynamic: fn != nil}
		dup := false
		switch {
		case fn == nil:
			dup = g.any != nil
			g.any, n.dynamic = n, false
		case d.Value == "":
			dup = g.any != nil
			g.any = n
		case strings.Contains(d.Value, "*"):
			n.parts = strings.Split(d.Value, "*")
			n.dynamic = !d.ShareThreshold
			for _, p := range g.wild {
				dup = dup || p.value == n.value
			}
			g.wild = append(g.wild, n)
		default:
			dup = g.exact[d.Value] != nil
			g.exact[d.Value], n.dynamic = n, false
		}
		if dup {
			c.fail(d.Line, dat, "duplicate descriptor: key %s, value %s and match already appear among its siblings", quote(d.Key), quote(d.Value))
			continue
		}
		if d.RateLimit != nil {
			n.rl, n.shadow = d.RateLimit, d.ShadowMode || d.QuotaMode || c.e.opts.shadow
			n.rule = c.rule(d, dat, nid)
		}
		n.groups = c.groups(d.Descriptors, dat+".descriptors", nid)
	}
	return gs
}

func lineOr(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}

// keyFunc resolves a descriptor's key; nil with true is generic_key.
func (c *compiler) keyFunc(d *Descriptor, at string) (KeyFunc, bool) {
	o := &c.e.opts
	k := d.Key
	switch {
	case k == "":
		c.fail(d.Line, at+".key", "key is required")
		return nil, false
	case o.anyKey && k != "generic_key":
		return proxyKey, true
	case o.keys[k] != nil:
		return o.keys[k], true
	case k == "generic_key":
		return nil, true
	case k == "remote_address":
		ip := o.clientIP
		return func(r Request) (string, error) {
			// A peer address without a port was rewritten from a header
			// by a middleware before the limiter: refuse it, as
			// keyfuncs.IP's key function does.
			peer := r.RemoteAddr()
			if err := clientip.CheckRemoteAddr(peer); err != nil {
				return "", err
			}
			return ip.KeyFrom(peer, r)
		}, true
	case k == "path":
		return func(r Request) (string, error) { return cleanPath(r.Path()), nil }, true
	case k == "method":
		return func(r Request) (string, error) { return r.Method(), nil }, true
	case k == "route":
		return func(r Request) (string, error) {
			rt := r.Route()
			if rt == "" {
				rt = cleanPath(r.Path())
			}
			return r.Method() + " " + rt, nil
		}, true
	case k == "user":
		if o.userKey == nil {
			c.fail(d.Line, at+".key", "descriptor key user needs the engine option rules.WithUserKey")
			return nil, false
		}
		uk := o.userKey
		toKey := keyval.ValueKey("rules: user")
		return func(r Request) (string, error) { return toKey(r.Value(uk)) }, true
	case hasPrefix(k, "header:"):
		name := strings.TrimPrefix(k, "header:")
		if !validToken(name) {
			c.fail(d.Line, at+".key", "header name %s is not a valid field name", quote(name))
			return nil, false
		}
		name = canonicalHeader(name)
		return func(r Request) (string, error) {
			for _, v := range r.Values(name) {
				if v = strings.TrimSpace(v); v != "" {
					return v, nil
				}
			}
			return "", nil
		}, true
	case hasPrefix(k, "query:"):
		name := strings.TrimPrefix(k, "query:")
		if name == "" {
			c.fail(d.Line, at+".key", "query parameter name is empty")
			return nil, false
		}
		return func(r Request) (string, error) { return r.Query(name), nil }, true
	}
	c.fail(d.Line, at+".key", "unknown descriptor key %s (built in: %s, header:NAME, query:NAME; register others with rules.WithKey)", quote(k), strings.Join(builtins, ", "))
	return nil, false
}

// proxyKey is the KeyFunc of a key under WithAnyKey: a request has no
// value for it.
func proxyKey(Request) (string, error) { return "", nil }

var builtins = []string{"remote_address", "generic_key", "user", "route", "path", "method"}

func builtin(name string) bool { return slices.Contains(builtins, name) }

func hasPrefix(s, p string) bool { return strings.HasPrefix(s, p) }

// rule builds the limiter of a descriptor's rate limit; nil for unlimited
// or on error.
func (c *compiler) rule(d *Descriptor, at string, id identity) *rule {
	rl := d.RateLimit
	at += ".rate_limit"
	line := lineOr(rl.Line, d.Line)
	bad := func(format string, args ...any) *rule { c.fail(line, at, format, args...); return nil }
	if rl.Name != "" {
		if prev := c.names[rl.Name]; prev != "" {
			return bad("name %s is already used by %s", quote(rl.Name), shortPath(prev))
		}
		c.names[rl.Name] = at
	}
	if rl.Unlimited {
		if rl.Unit != "" || rl.RequestsPerUnit != 0 || rl.UnitMultiplier != 0 || rl.Algorithm != "" || rl.Burst != 0 || rl.SoftPercent != 0 {
			return bad("unlimited excludes unit, requests_per_unit, unit_multiplier, algorithm, burst and soft_percent")
		}
		if len(rl.Replaces) == 0 {
			return nil
		}
		r := &rule{name: rl.Name, replaces: rl.Replaces} // replaces, limits nothing
		c.rules = append(c.rules, r)
		c.ruleAt, c.lines = append(c.ruleAt, at), append(c.lines, line)
		return r
	}
	period, ok := units[strings.ToLower(rl.Unit)]
	if !ok {
		if rl.Unit == "" {
			return bad("unit is required (%s), or unlimited: true", unitNames)
		}
		return bad("unit %s is not one of %s", quote(rl.Unit), unitNames)
	}
	switch m := rl.UnitMultiplier; {
	case m < 0:
		return bad("unit_multiplier %d must be at least 1", m)
	case m > 1000:
		return bad("unit_multiplier %d is too large (at most 1000)", m)
	case m > 1:
		period *= time.Duration(m)
	}
	if rl.RequestsPerUnit < 0 {
		return bad("requests_per_unit %d must not be negative", rl.RequestsPerUnit)
	}
	alg := core.FixedWindow
	if rl.Algorithm != "" {
		a, err := core.ParseAlgorithm(rl.Algorithm)
		if err != nil {
			if name := shorten(rl.Algorithm); name != rl.Algorithm {
				_, err = core.ParseAlgorithm(name) // its error quotes the name whole
			}
			return bad("%v", err)
		}
		alg = a
	}
	if rl.RequestsPerUnit == 0 && (rl.Burst != 0 || rl.SoftPercent != 0) {
		return bad("requests_per_unit 0 blocks every request; burst and soft_percent do not apply")
	}
	lim := core.Limit{Algorithm: alg, Rate: core.Rate{Count: rl.RequestsPerUnit, Period: period}, Burst: rl.Burst}
	o := &c.e.opts
	opts := append([]core.Option{core.WithStore(o.store)}, o.limOpts...)
	if d.ShadowMode || d.QuotaMode || o.shadow {
		opts = append(opts, core.WithShadow())
	}
	if rl.SoftPercent != 0 {
		opts = append(opts, core.WithSoftPercent(rl.SoftPercent))
	}
	r := &rule{name: rl.Name, replaces: rl.Replaces, limit: lim, id: id, opts: opts}
	c.rules = append(c.rules, r)
	c.ruleAt, c.lines = append(c.ruleAt, at), append(c.lines, line)
	return r
}

// limiters names the limits of the compiled rules and builds their
// limiters. A limit is named after its rule's identity, readable (see
// identity.readable); the name is completed with a hash of the identity
// only where it would not tell the rule apart: a readable form that
// another rule of the config shares, or one longer than 64 bytes. A plain
// identity reads back unambiguously, so its readable form is never shared
// by another plain one and is kept whole when it fits.
func (c *compiler) limiters() {
	seen := map[string]int{}
	for _, r := range c.rules {
		if r.opts != nil {
			seen[r.id.readable()]++
		}
	}
	for i, r := range c.rules {
		if r.opts == nil {
			continue // unlimited
		}
		name := r.id.readable()
		if len(name) > 64 || seen[name] > 1 && !r.id.plain {
			name = r.id.hashed(name)
		}
		r.limit.Name = name
		l, err := core.NewLimiter(r.limit, r.opts...)
		// The identity has served: drop it, as it grows with the depth
		// of the rule, and a set keeps its rules while in force.
		r.id = identity{}
		if err != nil {
			c.fail(c.lines[i], c.ruleAt[i], "%v", err)
			continue
		}
		r.lim, r.opts = l, nil
		c.limited = append(c.limited, r)
	}
}

// An identity is where a rule is: its domain and descriptor path.
type identity struct {
	id    string // unambiguous: each part quoted
	name  string // readable: "domain/key:value/key@METHODS/path"
	plain bool   // name is unambiguous too (plainPart, plainElem)
}

// child is the identity of descriptor d, with its compiled match m, below
// id.
func (id identity) child(d *Descriptor, m *matcher) identity {
	spec := ""
	if m != nil {
		spec = strings.Join(m.methods, ",") + d.Match.Path
	}
	c := identity{
		id:    id.id + "/" + strconv.Quote(d.Key) + "=" + strconv.Quote(d.Value) + "@" + strconv.Quote(spec),
		name:  id.name + "/" + d.Key,
		plain: id.plain && m == nil && plainElem(d.Key, d.Value),
	}
	if d.Value != "" {
		c.name += ":" + d.Value
	}
	if spec != "" {
		c.name += "@" + spec
	}
	return c
}

// readable returns the identity's readable name written with the
// characters limit names allow (see core.Limit.Name), any other byte as
// "_": "auth/remote_address@POST/login", "api/header:X-Plan:gold".
func (id identity) readable() string {
	b := []byte(id.name)
	for i, ch := range b {
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9':
		case strings.IndexByte(core.NameSymbols, ch) >= 0:
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// hashed returns readable, the identity's readable name, cut to 47 bytes
// and completed with a hash of the unambiguous identity, so that distinct
// identities get distinct names.
func (id identity) hashed(readable string) string {
	sum := sha256.Sum256([]byte(id.id))
	h := hex.EncodeToString(sum[:8])
	if len(readable) > 47 {
		readable = readable[:47]
	}
	return readable + "-" + h
}

// plainPart reports whether s is a non-empty run of letters, digits and
// "-_.": no separator of a limit name.
func plainPart(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			return false
		}
	}
	return true
}

// plainElem reports whether a descriptor's key and value read back
// unambiguously from "key:value": plain parts, with the one colon of
// "header:NAME" and "query:NAME" in the key, and no value after a key
// named header or query, which would read as such a key.
func plainElem(key, value string) bool {
	if name, ok := strings.CutPrefix(key, "header:"); ok {
		key = name
	} else if name, ok := strings.CutPrefix(key, "query:"); ok {
		key = name
	} else if value != "" && (key == "header" || key == "query") {
		return false
	}
	return plainPart(key) && (value == "" || plainPart(value))
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(('a' <= ch && ch <= 'z') || ('A' <= ch && ch <= 'Z') || ('0' <= ch && ch <= '9') || strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0) {
			return false
		}
	}
	return true
}

func canonicalHeader(s string) string {
	return strings.Clone(textprotoCanonical(s))
}
