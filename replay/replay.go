package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// Options configure a replay: how the log reads, which limits it goes
// through, and what the report holds.
type Options struct {
	// Format is "combined" (the default; the nginx/Apache common format,
	// its prefix, reads too; "common" is accepted as a name) or "json",
	// one object per line, read with Fields.
	Format string

	// Fields names the members of JSON lines.
	Fields Fields

	// MaxLineBytes bounds a line (default DefaultMaxLineBytes, at most
	// MaxLineBytesLimit); a longer line is counted as bad and skipped,
	// never held whole.
	MaxLineBytes int

	// MaxJump is how far ahead of the latest time seen a line's time may
	// jump, unconfirmed (default: the longest period of the limits, and
	// at least an hour). A line that jumps further ahead is held, with
	// the lines after it, until JumpLines lines in a row agree: each far
	// ahead of the latest time seen and within MaxJump of the line
	// before it. Then the clock did move (a quiet night, a gap between
	// files) and they are all replayed. A line that does not agree ends
	// the run: the lines held were outliers, such as a wrong clock or a
	// future date, and are counted as bad lines, "time jump", and not
	// replayed. The first lines are likewise held until JumpLines of
	// them agree, or at least two of them do and the next is later still
	// (the log starts, then pauses), so that the replay's clock starts at
	// the first line kept; lines that jump at the end of the log are not
	// replayed, unless no line was (a log shorter than JumpLines).
	MaxJump time.Duration

	// JumpLines is how many lines in a row must agree to move the
	// replay's clock by more than MaxJump, or to start it (default
	// DefaultJumpLines, 5; from 2 to MaxJumpLines, 64). Fewer lines far
	// in the future (a wrong clock, a forged date) are bad lines and
	// leave the clock where it was. The lines of a run are held in
	// memory until it is settled.
	JumpLines int

	// MaxClients caps the distinct clients a replay tracks (default
	// DefaultMaxClients); each costs about 300 bytes of memory with one
	// limit, 700 with the five algorithms side by side. Once the cap is
	// reached, the requests of clients first seen
	// after it are not replayed: they are counted in
	// Report.Untracked, and the report says where the cap was reached.
	// The requests of the clients tracked before are replayed to the
	// end. With Rules, each rule tracks its clients apart, and a request
	// is not replayed when one of its rules is full and its client new
	// to it.
	MaxClients int

	// Limits are the limits to replay, each on its own with its own
	// counters: one, or one per algorithm to compare them. Their key is
	// Key. Exactly one of Limits and Rules is set.
	Limits []core.Limit

	// Key says what a client is, for Limits: "ip" (the default: the
	// client address, as keyfuncs.IP finds it with TrustedProxies),
	// "header:NAME" or "user".
	Key string

	// TrustedProxies are the CIDRs of proxies whose X-Forwarded-For (a
	// header member of JSON lines) names the client, as
	// keyfuncs.TrustedProxies; for Key "ip" and the rules' remote_address.
	TrustedProxies []string

	// Rules, instead of Limits, decides every request as the rules
	// middleware does with this config: descriptor keys remote_address,
	// header:NAME, user, path, method, route (the path) and generic_key.
	Rules *rules.Config

	// ShowKeys shows client keys in the report as they are; by default
	// the report names a client by core.KeyHash of its key.
	ShowKeys bool

	// Top is how many of the most limited clients the report lists per
	// limit (default 10).
	Top int

	// TargetReject and TargetLimited, shares between 0 and 1 (0.001 is
	// 0.1%), ask for suggestions (Limits only): per algorithm, the
	// smallest limit that rejects at most that share of the requests, and
	// the smallest that limits at most that share of the clients. Zero
	// asks for none. A target counts every request, an outlier's too
	// (see OutlierFactor): when one client sends half the requests, a
	// limit that refused it would reject up to half of them, so a target
	// keeps the limit near its peak. Each suggestion says what it does to
	// the outliers.
	TargetReject, TargetLimited float64

	// Headroom, a factor from 1 to MaxHeadroom (1.5 leaves 50% over),
	// asks for a suggestion per algorithm sized from the normal clients
	// alone (Limits only): the busiest normal client's peak times
	// Headroom, rounded up. A client's peak is the most requests it sent
	// in any interval one period long; the outliers are left out, and the
	// suggestion says how much of their traffic it refuses. Zero asks
	// for none.
	Headroom float64

	// OutlierFactor tells normal clients from outliers, for suggestions:
	// a client whose peak is more than OutlierFactor times the median
	// client's peak is an outlier (default DefaultOutlierFactor; at
	// least 1). See NormalClients.
	OutlierFactor float64
}

// DefaultOutlierFactor is the default Options.OutlierFactor: a client
// that peaked at more than 10 times the median client's peak is an
// outlier.
const DefaultOutlierFactor = 10

// MaxHeadroom is the largest Options.Headroom.
const MaxHeadroom = 100

// DefaultJumpLines is the default Options.JumpLines: a run of 5 lines
// that agree moves the replay's clock past Options.MaxJump.
const DefaultJumpLines = 5

// MaxJumpLines is the largest Options.JumpLines.
const MaxJumpLines = 64

// DefaultMaxClients is the default Options.MaxClients: 1,000,000
// clients, about 0.3 GB of memory with one limit and 0.7 GB with the
// five algorithms side by side (see docs/replay.md).
const DefaultMaxClients = 1_000_000

// DefaultMaxLineBytes is the default Options.MaxLineBytes.
const DefaultMaxLineBytes = 64 << 10

// MaxLineBytesLimit is the largest Options.MaxLineBytes: 1 MiB. Each
// replayer holds a buffer of that size, and a replay that suggests limits
// runs GOMAXPROCS of them at once.
const MaxLineBytesLimit = 1 << 20

// An Input is one log to replay. A replay that suggests limits replays
// its inputs more than once, so Open must give the same content each
// time, and it replays candidates on up to GOMAXPROCS goroutines at
// once, each reading the inputs itself: Open may be called several times
// and concurrently, and each ReadCloser it returns is read by one
// goroutine. Gzip-compressed content is recognized and read
// transparently.
type Input struct {
	Name string // for messages, such as the file name
	Open func() (io.ReadCloser, error)
}

type keyKind uint8

const (
	keyIP keyKind = iota
	keyHeader
	keyUser
)

// userKey is the rules engine's key for a line's user.
type userKey struct{}

// A replayer reads logs through one set of lanes.
type replayer struct {
	o       *Options
	p       *parser
	ip      *clientip.ClientIP
	ipOpts  []keyfuncs.IPOption // of ip, for the rules' remote_address
	key     keyKind
	hdr     int              // header index of keyHeader
	raw     map[string]int32 // client field to client, when the field alone is the key
	tr      *tracker         // the clients of Limits
	specs   []core.Limit
	visible int // specs past it are replayed only for the comparison
	lanes   []*lane
	detail  bool // the main pass: measure everything, not only rejections
	started bool
	now     int64
	first   int64
	jump    int64 // Options.MaxJump, or its default

	// Lines held until a run of them tells whether the clock jumps;
	// see Options.MaxJump. held[:nHeld] are in use; the buffers of the
	// others are kept for reuse.
	held      []heldLine
	nHeld     int
	jumpLines int // Options.JumpLines, or its default
	ctx       context.Context
	br        *bufio.Reader

	// The client cap: Options.MaxClients, or its default, and where it
	// was first reached (capName empty until then).
	maxClients int
	capName    string
	capN       int
	untracked  int64

	counter, log         int // lane indexes for the comparison; -1: none
	counterOnly, logOnly int64

	engine *rules.Engine
	byName map[string]*lane
	events []core.Event
	buf    [16]core.Check

	lines, records, bad, outOfOrder, unkeyed, logged429 int64
	badSamples                                          []BadLine
	ser                                                 *series
	sentPeak                                            peak
	total, totalAdmitted, totalRejected                 int64
}

// A lane is one limit replayed, with what it decided.
type lane struct {
	limit    core.Limit
	lim      *core.Limiter
	tr       *tracker
	hidden   bool // replayed only for the comparison
	shadow   bool // a rule in shadow mode rejected (would have)
	col      int  // series column
	requests int64
	admitted int64
	rejected int64
	rej      []int32 // per client
	adm      []times // per client, admitted within the last period (detail)
	limited  int
	admPeak  peak
	rejPeak  peak
	burst    int32 // the most admitted to one client in one period
	burstID  int32
	burstAt  int64
	allowed  bool // the last decision

	// With Rules: requests this rule matched but did not decide, as
	// another rule rejected them first (or after it, its count given
	// back); they count in requests only.
	notDecided int64
	saturated  bool // a client had more than maxTimes admitted in one period
}

func newReplayer(ctx context.Context, o *Options, specs []core.Limit, detail bool) (*replayer, error) {
	p, err := newParser(o.Format, o.Fields)
	if err != nil {
		return nil, err
	}
	r := &replayer{o: o, p: p, specs: specs, visible: len(specs), detail: detail, counter: -1, log: -1, ctx: ctx,
		jumpLines: cmp.Or(o.JumpLines, DefaultJumpLines), maxClients: cmp.Or(o.MaxClients, DefaultMaxClients)}
	if len(o.TrustedProxies) > 0 {
		r.ipOpts = append(r.ipOpts, keyfuncs.TrustedProxies(o.TrustedProxies...))
	}
	if r.ip, err = clientip.New(r.ipOpts...); err != nil {
		return nil, fmt.Errorf("replay: trusted proxies: %w", err)
	}
	if r.jump, err = maxJump(o, r.ipOpts); err != nil {
		return nil, err
	}
	if o.Rules != nil {
		return r, nil
	}
	switch k := o.Key; {
	case k == "" || k == "ip":
		r.key = keyIP
		if len(o.TrustedProxies) == 0 || len(p.headerNames) == 0 || p.header("X-Forwarded-For") < 0 {
			r.raw = map[string]int32{}
		}
	case k == "user":
		r.key = keyUser
	case strings.HasPrefix(k, "header:") && len(k) > len("header:"):
		r.key = keyHeader
		name := canonicalHeader(k[len("header:"):])
		if r.hdr = p.header(name); r.hdr < 0 {
			valid := "Referer, User-Agent (the combined format's)"
			if p.json {
				valid = "the headers given a JSON member in Fields.Headers (-header NAME=MEMBER)"
			}
			return nil, fmt.Errorf("replay: key %q: the log has no header %s (valid: %s)", k, name, valid)
		}
	default:
		return nil, fmt.Errorf("replay: unknown key %q (valid: ip, header:NAME, user)", k)
	}
	if len(specs) > 0 {
		r.tr = newTracker(int64(specs[0].Rate.Period))
	}
	return r, nil
}

// maxJump returns Options.MaxJump, or its default: the longest period
// of the limits, at least an hour.
func maxJump(o *Options, ipOpts []keyfuncs.IPOption) (int64, error) {
	if o.MaxJump > 0 {
		return int64(o.MaxJump), nil
	}
	jump := time.Hour
	for _, l := range o.Limits {
		jump = max(jump, l.Rate.Period)
	}
	if o.Rules != nil {
		e, err := newEngine(o, time.Now, ipOpts, func(core.Event) {})
		if err != nil {
			return 0, err
		}
		if err := e.Load(*o.Rules); err != nil {
			return 0, err
		}
		for _, l := range e.Limits() {
			jump = max(jump, l.Rate.Period)
		}
	}
	return int64(jump), nil
}

// start builds the lanes at the time of the first line, which the
// stores take as their origin.
func (r *replayer) start(at int64) error {
	r.started, r.now, r.first = true, at, at
	clock := func() time.Time { return time.Unix(0, r.now) }
	if r.o.Rules != nil {
		e, err := newEngine(r.o, clock, r.ipOpts, func(e core.Event) { r.events = append(r.events, e) })
		if err != nil {
			return err
		}
		if err := e.Load(*r.o.Rules); err != nil {
			return err
		}
		r.engine, r.byName = e, map[string]*lane{}
		if r.detail {
			r.ser = newSeries(at, 2)
		}
		return nil
	}
	cols := 1
	for i, l := range r.specs {
		lim, err := core.NewLimiter(l, core.WithStore(&core.MemoryStore{Clock: clock}))
		if err != nil {
			return err
		}
		ln := &lane{limit: l, lim: lim, tr: r.tr, hidden: i >= r.visible}
		if !ln.hidden {
			ln.col = cols
			cols++
		}
		r.lanes = append(r.lanes, ln)
		if l.Algorithm == core.SlidingWindowCounter && r.counter < 0 {
			r.counter = i
		}
	}
	// The comparison pairs the first counter with a log of the same
	// rate (Run adds one when there is none).
	if r.counter >= 0 {
		r.log = -1
		for i, l := range r.specs {
			if l.Algorithm == core.SlidingWindowLog && l.Rate == r.specs[r.counter].Rate {
				r.log = i
				break
			}
		}
	}
	if !r.detail || r.counter < 0 || r.log < 0 {
		r.counter, r.log = -1, -1
	}
	if r.detail {
		r.ser = newSeries(at, cols)
	}
	return nil
}

func newEngine(o *Options, clock func() time.Time, ipOpts []keyfuncs.IPOption, observe func(core.Event)) (*rules.Engine, error) {
	return rules.NewEngine(
		rules.WithStore(&core.MemoryStore{Clock: clock}),
		rules.WithClientIP(ipOpts...),
		rules.WithUserKey(userKey{}),
		rules.WithLimiterOptions(core.WithObserver(observe)),
	)
}

// pass replays every input, in order, as one log.
func (r *replayer) pass(inputs []Input) error {
	size := r.o.MaxLineBytes
	if size <= 0 {
		size = DefaultMaxLineBytes
	}
	r.br = bufio.NewReaderSize(nil, size+1)
	for _, in := range inputs {
		rc, err := in.Open()
		if err != nil {
			return fmt.Errorf("replay: %s: %w", in.Name, err)
		}
		err = r.read(in.Name, rc)
		if cerr := rc.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("replay: %s: %w", in.Name, cerr)
		}
		if err != nil {
			return err
		}
	}
	if r.nHeld > 0 {
		// The last lines: replayed if no line was (a short log, whose
		// lines agree), unconfirmed jumps otherwise.
		if r.started {
			r.dropHeld()
		} else if err := r.replayHeld(); err != nil {
			return err
		}
	}
	if r.detail && r.tr != nil {
		r.tr.finish()
	}
	return nil
}

var gzipMagic = []byte{0x1f, 0x8b}

// compressedError is the reason given for compressed content that cannot
// be read to its end.
func compressedError(err error) error {
	if err == io.ErrUnexpectedEOF {
		return errors.New("compressed input ends early")
	}
	return fmt.Errorf("compressed input is corrupt (%v)", err)
}

// A sourceReader remembers the error its input gave, so that an error
// of the gzip layer above it (content) can be told from one of the
// input itself (I/O).
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// read replays the lines of one input. An error of the input itself ends
// the replay; compressed content that is cut short or corrupt ends only
// this input, as one bad line (a log copied while it was being
// compressed is common), and the lines before it count.
func (r *replayer) read(name string, rd io.Reader) error {
	src := &sourceReader{r: rd}
	r.br.Reset(src)
	zipped := false
	if head, _ := r.br.Peek(2); bytes.Equal(head, gzipMagic) {
		zr, err := gzip.NewReader(r.br)
		if err != nil {
			if src.err != nil {
				return fmt.Errorf("replay: %s: %w", name, src.err)
			}
			r.lines++
			r.badLine(name, 1, compressedError(err), nil)
			return nil
		}
		defer zr.Close()
		r.br = bufio.NewReaderSize(zr, r.br.Size())
		zipped = true
	}
	n := 0
	for {
		line, err := r.br.ReadSlice('\n')
		if zipped && err != nil && err != io.EOF && err != bufio.ErrBufferFull && src.err == nil {
			// The compressed content ends early or is corrupt: the
			// partial line is not replayed.
			n++
			r.lines++
			r.badLine(name, n, compressedError(err), line)
			return nil
		}
		if err == bufio.ErrBufferFull {
			n++
			r.lines++
			r.badLine(name, n, errLong, nil)
			for err == bufio.ErrBufferFull {
				_, err = r.br.ReadSlice('\n')
			}
			if zipped && err != nil && err != io.EOF && src.err == nil {
				// Cut short or corrupt in the long line, counted as bad
				// already.
				return nil
			}
		} else if len(line) > 0 {
			n++
			line = bytes.TrimRight(line, "\r\n")
			if len(line) > 0 {
				r.lines++
				if lerr := r.line(name, n, line); lerr != nil {
					return lerr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay: %s: line %d: %w", name, n+1, err)
		}
		if r.lines&0xffff == 0 {
			if err := r.ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// maxSamples is how many bad lines the report quotes.
const maxSamples = 5

func (r *replayer) badLine(name string, n int, err error, line []byte) {
	r.bad++
	if !r.detail || len(r.badSamples) >= maxSamples {
		return
	}
	text := line
	if len(text) > 80 {
		text = text[:80]
	}
	r.badSamples = append(r.badSamples, BadLine{Input: name, Line: n, Reason: err.Error(), Text: strings.ToValidUTF8(string(text), "?")})
}

// A heldLine is a line held while a run of lines settles whether the
// clock jumps.
type heldLine struct {
	name string
	n    int
	at   int64
	line []byte
}

// line handles line n of input name: a line that parses is replayed,
// unless its time jumps ahead (see Options.MaxJump): it is then held,
// with the lines after it, until JumpLines of them in a row agree (the
// clock moved: they are replayed) or one does not (they were outliers).
func (r *replayer) line(name string, n int, line []byte) error {
	rec, err := r.p.parse(line)
	if err != nil {
		r.badLine(name, n, err, line)
		return nil
	}
	if r.nHeld > 0 {
		// A line agrees with the run when it is within MaxJump of the
		// run's last line and, once the clock has started, far ahead of
		// the latest time seen too.
		last := r.held[r.nHeld-1].at
		agrees := absDiff(rec.at, last) <= r.jump && (!r.started || rec.at-r.now > r.jump)
		switch {
		case agrees:
			r.hold(name, n, rec.at, line)
			if r.nHeld >= r.jumpLines {
				return r.replayHeld()
			}
			return nil
		case !r.started && r.nHeld >= 2 && rec.at > last:
			// The log starts with a few lines that agree, then a gap:
			// the clock starts at them.
			if err := r.replayHeld(); err != nil {
				return err
			}
			// The held lines overwrote the record: parse this one again.
			if rec, err = r.p.parse(line); err != nil {
				return fmt.Errorf("replay: %s: line %d: %w", name, n, err)
			}
		default:
			r.dropHeld()
		}
	}
	if !r.started || rec.at-r.now > r.jump {
		r.hold(name, n, rec.at, line)
		if r.nHeld >= r.jumpLines {
			return r.replayHeld()
		}
		return nil
	}
	return r.replay(name, n, rec)
}

// hold keeps a line of the run being settled.
func (r *replayer) hold(name string, n int, at int64, line []byte) {
	if r.nHeld == len(r.held) {
		r.held = append(r.held, heldLine{})
	}
	h := &r.held[r.nHeld]
	h.name, h.n, h.at, h.line = name, n, at, append(h.line[:0], line...)
	r.nHeld++
}

// replayHeld replays the lines held, in order: their run agreed.
func (r *replayer) replayHeld() error {
	n := r.nHeld
	r.nHeld = 0
	for i := range n {
		h := &r.held[i]
		if err := r.replayLine(h.name, h.n, h.line); err != nil {
			return err
		}
	}
	return nil
}

// dropHeld counts the lines held as bad: their run did not agree.
func (r *replayer) dropHeld() {
	for i := range r.nHeld {
		h := &r.held[i]
		r.badLine(h.name, h.n, errJump, h.line)
	}
	r.nHeld = 0
}

func absDiff(a, b int64) int64 {
	if a < b {
		return b - a
	}
	return a - b
}

// replayLine replays a held line, which parsed when it was read.
func (r *replayer) replayLine(name string, n int, line []byte) error {
	rec, err := r.p.parse(line)
	if err != nil {
		return fmt.Errorf("replay: %s: line %d: %w", name, n, err)
	}
	return r.replay(name, n, rec)
}

// replay decides the request of a parsed line.
func (r *replayer) replay(name string, n int, rec *record) error {
	r.records++
	if !r.started {
		if err := r.start(rec.at); err != nil {
			return err
		}
	}
	if rec.at < r.now {
		r.outOfOrder++
	} else {
		r.now = rec.at
	}
	now := r.now
	if r.detail {
		if rec.status == 429 {
			r.logged429++
		}
		r.sentPeak.add(now)
		r.ser.cols[0][r.ser.bucket(now)]++
	}
	if r.engine != nil {
		return r.decideRules(name, n, now)
	}
	id := r.clientID(rec)
	if id == untracked {
		r.untrack(name, n)
		return nil
	}
	if id < 0 {
		r.unkeyed++
		return nil
	}
	key := r.tr.keys[id]
	if r.detail {
		r.tr.sent(id, now)
	}
	for _, ln := range r.lanes {
		d, err := ln.lim.Take(r.ctx, key, 1)
		if err != nil {
			return fmt.Errorf("replay: %s: line %d: %w", name, n, err)
		}
		ln.decided(r, id, now, d.Allowed)
	}
	if r.counter >= 0 && r.log >= 0 {
		c, l := r.lanes[r.counter].allowed, r.lanes[r.log].allowed
		switch {
		case c && !l:
			r.counterOnly++
		case l && !c:
			r.logOnly++
		}
	}
	return nil
}

// decided records a lane's decision on client id at time now.
func (ln *lane) decided(r *replayer, id int32, now int64, allowed bool) {
	ln.requests++
	ln.allowed = allowed
	for int(id) >= len(ln.rej) {
		ln.rej = append(ln.rej, 0)
		if r.detail {
			ln.adm = append(ln.adm, times{})
		}
	}
	if !allowed {
		ln.rejected++
		if ln.rej[id] == 0 {
			ln.limited++
		}
		ln.rej[id]++
		if r.detail {
			ln.rejPeak.add(now)
		}
		return
	}
	ln.admitted++
	if !r.detail {
		return
	}
	ln.admPeak.add(now)
	if !ln.hidden {
		r.ser.cols[ln.col][r.ser.bucket(now)]++
	}
	q := &ln.adm[id]
	q.expire(now - int64(ln.tr.period))
	if q.push(now) {
		ln.saturated = true
	}
	if n := int32(q.len()); n > ln.burst {
		ln.burst, ln.burstID, ln.burstAt = n, id, now
	}
}

// untracked is the client of a line whose client is new once the client
// cap is reached.
const untracked = -2

// clientID returns the client of a line, -1 when the line has no key, or
// untracked.
func (r *replayer) clientID(rec *record) int32 {
	switch r.key {
	case keyHeader:
		v := bytes.TrimSpace(rec.headers[r.hdr])
		if len(v) == 0 {
			return -1
		}
		return r.tr.idBytes(v, r.maxClients)
	case keyUser:
		if len(rec.user) == 0 {
			return -1
		}
		return r.tr.idBytes(rec.user, r.maxClients)
	}
	if len(rec.client) == 0 {
		return -1
	}
	if r.raw != nil {
		if id, ok := r.raw[string(rec.client)]; ok {
			return id
		}
	}
	key, err := r.ip.KeyFrom(string(rec.client), lineHeaders{r})
	if err != nil {
		return -1
	}
	id, ok := r.tr.lookup(key, r.maxClients)
	if !ok {
		return untracked
	}
	// Several addresses may be one client (an IPv6 prefix): the cache
	// of addresses is bounded as the clients are.
	if r.raw != nil && len(r.raw) < r.maxClients {
		r.raw[string(rec.client)] = id
	}
	return id
}

// untrack counts a request not replayed because its client is new and
// the client cap is reached, and notes where that first happened.
func (r *replayer) untrack(name string, n int) {
	r.untracked++
	if r.capName == "" {
		r.capName, r.capN = name, n
	}
}

// lineHeaders are the header members of the current line.
type lineHeaders struct{ r *replayer }

func (h lineHeaders) Values(name string) []string {
	if i := h.r.p.header(name); i >= 0 && h.r.p.rec.headers[i] != nil {
		return []string{string(h.r.p.rec.headers[i])}
	}
	return nil
}

// decideRules decides the current line, n of input name, by the rules,
// as the middleware.
func (r *replayer) decideRules(name string, n int, now int64) error {
	req := logRequest{r}
	names, keys, err := r.engine.Matches(req)
	if err != nil {
		r.unkeyed++
		return nil
	}
	// A rule full of clients takes no new one: the request is then not
	// replayed at all, so that every rule's figures cover the same
	// requests.
	for i, rule := range names {
		if ln := r.ruleLane(rule); ln != nil && len(ln.tr.keys) >= r.maxClients {
			if _, ok := ln.tr.ids[keys[i]]; !ok {
				r.untrack(name, n)
				return nil
			}
		}
	}
	checks, err := r.engine.Checks(req, r.buf[:0])
	if err != nil {
		r.unkeyed++
		return nil
	}
	r.events = r.events[:0]
	d, err := core.TakeAll(r.ctx, checks, 1)
	if err != nil {
		if errors.Is(err, core.ErrMissingKey) {
			r.unkeyed++
			return nil
		}
		return err
	}
	r.total++
	if d.Allowed {
		r.totalAdmitted++
		if r.detail {
			r.ser.cols[1][r.ser.bucket(now)]++
		}
	} else {
		r.totalRejected++
	}
	for i, name := range names {
		ln := r.ruleLane(name)
		if ln == nil {
			continue
		}
		id, _ := ln.tr.id(keys[i])
		if r.detail {
			ln.tr.sent(id, now)
		}
		// TakeAll asks the checks in turn and stops at the first that
		// rejects: those before it give back their count, those after
		// it (and the shadow ones) are not counted, and only the
		// rejecting limits are reported when the request is rejected.
		// A rule admits a request when it said so and the request was
		// admitted; when another rule rejected it, it did not decide.
		admitted, rejected := false, false
		for _, e := range r.events {
			if e.Limit != name {
				continue
			}
			switch e.Outcome {
			case core.Denied, core.ErrorDenied:
				rejected = true
			case core.ShadowDenied:
				rejected, ln.shadow = true, true
			default: // Allowed, SoftAllowed, ErrorAllowed
				admitted = true
			}
		}
		switch {
		case rejected:
			ln.decided(r, id, now, false)
		case admitted && d.Allowed:
			ln.decided(r, id, now, true)
		default:
			ln.requests++
			ln.notDecided++
		}
	}
	return nil
}

// ruleLane returns the lane of the rule limit named name, made at its
// first request.
func (r *replayer) ruleLane(name string) *lane {
	if ln, ok := r.byName[name]; ok {
		return ln
	}
	for _, l := range r.engine.Limits() {
		if l.Name == name {
			ln := &lane{limit: l, tr: newTracker(int64(l.Rate.Period)), hidden: true}
			r.lanes = append(r.lanes, ln)
			r.byName[name] = ln
			return ln
		}
	}
	return nil
}

// logRequest is the current line as a rules.Request.
type logRequest struct{ r *replayer }

func (q logRequest) rec() *record                { return &q.r.p.rec }
func (q logRequest) Context() context.Context    { return q.r.ctx }
func (q logRequest) Route() string               { return "" }
func (q logRequest) Values(name string) []string { return lineHeaders(q).Values(name) }

func (q logRequest) Method() string {
	if m := q.rec().method; len(m) > 0 {
		return string(m)
	}
	return "GET"
}

func (q logRequest) rawPath() (path, query string) {
	u := string(q.rec().uri)
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i], u[i+1:]
	}
	return u, ""
}

func (q logRequest) Path() string {
	p, _ := q.rawPath()
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

func (q logRequest) EscapedPath() string {
	p, _ := q.rawPath()
	if u, err := url.PathUnescape(p); err == nil && u != p {
		return p
	}
	return ""
}

func (q logRequest) Query(name string) string {
	_, raw := q.rawPath()
	if raw == "" {
		return ""
	}
	v, err := url.ParseQuery(raw)
	if err != nil && len(v) == 0 {
		return ""
	}
	return v.Get(name)
}

// RemoteAddr is the logged client as a peer address, "IP:0".
func (q logRequest) RemoteAddr() string {
	c := string(q.rec().client)
	if a, err := netip.ParseAddr(c); err == nil {
		return netip.AddrPortFrom(a, 0).String()
	}
	return c
}

func (q logRequest) Value(key any) any {
	if _, ok := key.(userKey); ok && len(q.rec().user) > 0 {
		return string(q.rec().user)
	}
	return nil
}
