package replay

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Fields names the members of a JSON log line that a replay reads. Every
// member is looked up at the top level of the line's object; an empty
// name takes the default in parentheses.
type Fields struct {
	// Time is the request's time (default "time"): a string in RFC 3339
	// ("2024-05-01T12:00:00.250Z") or the common log format
	// ("01/May/2024:12:00:00 +0000"), or a number of seconds since the
	// Unix epoch, with a fraction ("1714564800.250"); a number above 1e11
	// is read as milliseconds, above 1e14 as microseconds, above 1e17 as
	// nanoseconds. Whatever its form, a time must be from the years 1970
	// to 2200 (UTC), a real date (no 31 February), with a zone offset of
	// at most 14 hours; any other is a bad line.
	Time string
	// Client is the peer address, an IP with or without a port (default
	// "remote_addr").
	Client string
	// Method is the request method (default "method").
	Method string
	// Path is the request URI, path and query (default "path").
	Path string
	// Status is the response status (default "status").
	Status string
	// User is the authenticated user (default "user").
	User string
	// Headers maps a request header name, such as "X-Forwarded-For" or
	// "X-API-Key", to the member that holds its value, such as
	// "http_x_forwarded_for".
	Headers map[string]string
}

// A record is one parsed log line. Its byte slices point into the line
// (or into the parser's scratch buffer) and are valid until the next line.
type record struct {
	at      int64 // Unix nanoseconds
	client  []byte
	method  []byte
	uri     []byte
	user    []byte
	status  int
	headers [][]byte // by header index (parser.headerNames); nil: absent
}

// A parser turns lines of one format into records, reusing its buffers.
type parser struct {
	json        bool
	fields      []string // JSON member names, by field index below
	headerNames []string // canonical header names, by header index
	scratch     []byte   // unescaped JSON strings
	rec         record
}

// Field indexes of parser.fields.
const (
	fTime = iota
	fClient
	fMethod
	fPath
	fStatus
	fUser
	fHeaders // the first header
)

// errors of a line; their text is what the report says of a bad line.
var (
	errLong    = errors.New("line too long")
	errNoTime  = errors.New("no time")
	errBadTime = errors.New("time does not parse")
	errRange   = errors.New("time out of range (years 1970 to 2200)")
	errDate    = errors.New("no such date")
	errZone    = errors.New("zone offset beyond 14 hours")
	errSyntax  = errors.New("not in the format")
	errJump    = errors.New("time jump")
)

// The times a line may give, in Unix nanoseconds: from 1970-01-01 to the
// end of 2200, UTC. Far from int64's limits (1678 to 2262), so that
// differences of two times never overflow.
const (
	minTime = int64(0)
	maxTime = int64(7289654400)*int64(time.Second) - 1 // 2201-01-01T00:00:00Z, less 1 ns

	maxZoneOffset = 14 * 3600 // seconds
)

// inRange checks a time, as Unix seconds and nanoseconds within the
// second, and returns it as Unix nanoseconds.
func inRange(sec, nsec int64) (int64, error) {
	if sec < minTime/int64(time.Second) || sec > maxTime/int64(time.Second) {
		return 0, errRange
	}
	return sec*int64(time.Second) + nsec, nil
}

// canonicalHeader returns the canonical form of a header name, as
// net/textproto writes it, without importing it for one function.
func canonicalHeader(s string) string {
	b := []byte(s)
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}

func newParser(format string, f Fields) (*parser, error) {
	p := &parser{}
	switch format {
	case "", "combined", "common":
		// The combined format carries two request headers.
		p.headerNames = []string{"Referer", "User-Agent"}
	case "json":
		p.json = true
		def := func(v, d string) string {
			if v == "" {
				return d
			}
			return v
		}
		p.fields = []string{def(f.Time, "time"), def(f.Client, "remote_addr"), def(f.Method, "method"),
			def(f.Path, "path"), def(f.Status, "status"), def(f.User, "user")}
		names := make([]string, 0, len(f.Headers))
		for h := range f.Headers {
			names = append(names, h)
		}
		slices.Sort(names)
		for _, h := range names {
			if h == "" || f.Headers[h] == "" {
				return nil, fmt.Errorf("replay: header %q: empty header or field name", h)
			}
			p.headerNames = append(p.headerNames, canonicalHeader(h))
			p.fields = append(p.fields, f.Headers[h])
		}
	default:
		return nil, fmt.Errorf("replay: unknown format %q (valid: combined, common, json)", format)
	}
	p.rec.headers = make([][]byte, len(p.headerNames))
	return p, nil
}

// header returns the index of a canonical header name, or -1.
func (p *parser) header(name string) int {
	for i, h := range p.headerNames {
		if h == name {
			return i
		}
	}
	return -1
}

// parse parses one line, without its newline, into p.rec.
func (p *parser) parse(line []byte) (*record, error) {
	r := &p.rec
	r.at, r.client, r.method, r.uri, r.user, r.status = 0, nil, nil, nil, nil, 0
	for i := range r.headers {
		r.headers[i] = nil
	}
	if p.json {
		return r, p.parseJSON(line)
	}
	return r, p.parseCombined(line)
}

// parseCombined reads the common log format and its combined extension:
//
//	host ident user [10/Oct/2000:13:55:36 -0700] "GET /x HTTP/1.1" 200 2326 "referer" "agent"
func (p *parser) parseCombined(b []byte) error {
	r := &p.rec
	i := bytes.IndexByte(b, ' ')
	if i <= 0 {
		return errSyntax
	}
	r.client = b[:i]
	b = b[i+1:]
	// ident
	if i = bytes.IndexByte(b, ' '); i < 0 {
		return errSyntax
	}
	b = b[i+1:]
	// user " [" time "] \"": the user may hold " [" and "]" (a name is
	// the client's to choose), but no unescaped quote (servers escape
	// it, as \" or \x22), so the time ends at the first `] "`, and it
	// starts after the last " [" before that (a time holds none).
	end := bytes.Index(b, []byte(`] "`))
	if end < 0 {
		return errSyntax
	}
	if i = bytes.LastIndex(b[:end], []byte(" [")); i < 0 {
		return errSyntax
	}
	if u := b[:i]; len(u) > 0 && !(len(u) == 1 && u[0] == '-') {
		r.user = u
	}
	at, err := parseCLFTime(b[i+2 : end])
	if err != nil {
		return err
	}
	r.at = at
	b = b[end+1:]
	req, rest, ok := quoted(b[1:])
	if !ok {
		return errSyntax
	}
	if i = bytes.IndexByte(req, ' '); i >= 0 {
		r.method = req[:i]
		u := req[i+1:]
		if j := bytes.IndexByte(u, ' '); j >= 0 {
			u = u[:j]
		}
		r.uri = u
	} else if !(len(req) == 1 && req[0] == '-') {
		r.method = req
	}
	b = rest
	if len(b) < 4 || b[0] != ' ' {
		return errSyntax
	}
	st := 0
	for _, c := range b[1:4] {
		if c < '0' || c > '9' {
			return errSyntax
		}
		st = st*10 + int(c-'0')
	}
	r.status = st
	b = b[4:]
	if len(b) > 0 && b[0] != ' ' {
		return errSyntax
	}
	// bytes, then the optional "referer" "agent".
	if len(b) == 0 {
		return nil
	}
	b = b[1:]
	if i = bytes.IndexByte(b, ' '); i < 0 {
		return nil // common format
	}
	b = b[i+1:]
	for h := 0; h < 2 && len(b) > 0 && b[0] == '"'; h++ {
		v, rest, ok := quoted(b)
		if !ok {
			return errSyntax
		}
		if !(len(v) == 1 && v[0] == '-') {
			r.headers[h] = v
		}
		b = rest
		if len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
	}
	return nil
}

// quoted returns the contents of the quoted string that b starts with,
// skipping backslash escapes (which it leaves as they are), and what
// follows the closing quote.
func quoted(b []byte) (v, rest []byte, ok bool) {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return b[1:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// parseCLFTime parses "10/Oct/2000:13:55:36 -0700" into Unix nanoseconds.
func parseCLFTime(b []byte) (int64, error) {
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' || b[20] != ' ' {
		return 0, errBadTime
	}
	day, ok1 := digits(b[0:2])
	year, ok2 := digits(b[7:11])
	hour, ok3 := digits(b[12:14])
	minute, ok4 := digits(b[15:17])
	sec, ok5 := digits(b[18:20])
	zh, ok6 := digits(b[22:24])
	zm, ok7 := digits(b[24:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || (b[21] != '+' && b[21] != '-') {
		return 0, errBadTime
	}
	month := 0
	for i, m := range months {
		if string(b[3:6]) == m {
			month = i + 1
			break
		}
	}
	if month == 0 || day < 1 || hour > 23 || minute > 59 || sec > 60 || zm > 59 {
		return 0, errBadTime
	}
	if day > daysIn(year, month) {
		return 0, errDate
	}
	off := int64(zh*3600 + zm*60)
	if off > maxZoneOffset {
		return 0, errZone
	}
	if b[21] == '-' {
		off = -off
	}
	// year has 4 digits: the seconds fit, whatever the year.
	s := daysFromCivil(int64(year), month, day)*86400 + int64(hour*3600+minute*60+sec) - off
	return inRange(s, 0)
}

// daysIn returns the days of a month of the proleptic Gregorian calendar.
func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic
// Gregorian date (the well-known era-based conversion).
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// parseJSON reads one JSON object per line, picking the configured
// members at its top level.
func (p *parser) parseJSON(b []byte) error {
	r := &p.rec
	p.scratch = p.scratch[:0]
	b = trimSpace(b)
	if len(b) < 2 || b[0] != '{' {
		return errSyntax
	}
	i := skipWS(b, 1)
	if i < len(b) && b[i] == '}' {
		i = skipWS(b, i+1)
		if i != len(b) {
			return errSyntax
		}
		return errNoTime
	}
	var timeVal []byte
	timeStr := false
	for {
		if i >= len(b) || b[i] != '"' {
			return errSyntax
		}
		key, kesc, next, ok := jsonString(b, i)
		if !ok {
			return errSyntax
		}
		i = skipWS(b, next)
		if i >= len(b) || b[i] != ':' {
			return errSyntax
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return errSyntax
		}
		var val []byte
		isStr, esc := false, false
		start := i
		switch c := b[i]; {
		case c == '"':
			val, esc, i, ok = jsonString(b, i)
			isStr = true
		case c == '{' || c == '[':
			i, ok = skipComposite(b, i)
		default:
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ' ' && b[i] != '\t' {
				i++
			}
			val, ok = b[start:i], i > start
		}
		if !ok {
			return errSyntax
		}
		if kesc {
			// A member name with escapes: compare its unescaped form.
			key, ok = p.unescape(key)
			if !ok {
				return errSyntax
			}
		}
		if f := p.field(key); f >= 0 && val != nil {
			if esc {
				if val, ok = p.unescape(val); !ok {
					return errSyntax
				}
			}
			if !isStr && len(val) == 4 && string(val) == "null" {
				val = nil
			}
			switch f {
			case fTime:
				timeVal, timeStr = val, isStr
			case fClient:
				r.client = val
			case fMethod:
				r.method = val
			case fPath:
				r.uri = val
			case fStatus:
				if n, ok := digits(val); ok && len(val) > 0 && len(val) < 4 {
					r.status = n
				}
			case fUser:
				if len(val) > 0 && !(len(val) == 1 && val[0] == '-') {
					r.user = val
				}
			default:
				if len(val) > 0 && !(len(val) == 1 && val[0] == '-') {
					r.headers[f-fHeaders] = val
				}
			}
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return errSyntax
		}
		if b[i] == '}' {
			if skipWS(b, i+1) != len(b) {
				return errSyntax
			}
			break
		}
		if b[i] != ',' {
			return errSyntax
		}
		i = skipWS(b, i+1)
	}
	if timeVal == nil {
		return errNoTime
	}
	at, err := parseJSONTime(timeVal, timeStr)
	if err != nil {
		return err
	}
	r.at = at
	return nil
}

// field returns the index of the configured member name, or -1. The first
// match wins, so a member named twice in the configuration is read once.
func (p *parser) field(key []byte) int {
	for i, f := range p.fields {
		if string(key) == f {
			return i
		}
	}
	return -1
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// jsonString returns the raw contents of the JSON string starting at
// b[i], whether it holds escapes, and the index after its closing quote.
func jsonString(b []byte, i int) (v []byte, esc bool, next int, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return b[i+1 : j], esc, j + 1, true
		}
	}
	return nil, false, 0, false
}

// skipComposite skips the object or array starting at b[i].
func skipComposite(b []byte, i int) (int, bool) {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			_, _, next, ok := jsonString(b, i)
			if !ok {
				return 0, false
			}
			i = next - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return 0, false
}

// unescape decodes the escapes of a raw JSON string into p.scratch.
func (p *parser) unescape(v []byte) ([]byte, bool) {
	start := len(p.scratch)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' {
			p.scratch = append(p.scratch, c)
			continue
		}
		i++
		if i >= len(v) {
			return nil, false
		}
		switch v[i] {
		case '"', '\\', '/':
			p.scratch = append(p.scratch, v[i])
		case 'b':
			p.scratch = append(p.scratch, '\b')
		case 'f':
			p.scratch = append(p.scratch, '\f')
		case 'n':
			p.scratch = append(p.scratch, '\n')
		case 'r':
			p.scratch = append(p.scratch, '\r')
		case 't':
			p.scratch = append(p.scratch, '\t')
		case 'u':
			if i+4 >= len(v) {
				return nil, false
			}
			n, err := strconv.ParseUint(string(v[i+1:i+5]), 16, 32)
			if err != nil {
				return nil, false
			}
			r := rune(n)
			i += 4
			if r >= 0xd800 && r < 0xdc00 && i+6 < len(v) && v[i+1] == '\\' && v[i+2] == 'u' {
				if lo, err := strconv.ParseUint(string(v[i+3:i+7]), 16, 32); err == nil && lo >= 0xdc00 && lo < 0xe000 {
					r = (r-0xd800)<<10 + (rune(lo) - 0xdc00) + 0x10000
					i += 6
				}
			}
			p.scratch = utf8.AppendRune(p.scratch, r)
		default:
			return nil, false
		}
	}
	return p.scratch[start:], true
}

// parseJSONTime reads a JSON time member: see Fields.Time.
func parseJSONTime(v []byte, isStr bool) (int64, error) {
	if isStr {
		if len(v) == 26 && v[2] == '/' {
			return parseCLFTime(v)
		}
		if len(v) >= 20 && v[4] == '-' {
			t, err := time.Parse(time.RFC3339Nano, string(v))
			if err != nil {
				// time.Parse refuses dates such as 31 February, as
				// "day out of range".
				if strings.Contains(err.Error(), "day out of range") {
					return 0, errDate
				}
				return 0, errBadTime
			}
			if _, off := t.Zone(); off > maxZoneOffset || off < -maxZoneOffset {
				return 0, errZone
			}
			// t.Unix, unlike t.UnixNano, holds any year time.Parse reads.
			return inRange(t.Unix(), int64(t.Nanosecond()))
		}
		return epoch(v)
	}
	return epoch(v)
}

// epoch reads a number of seconds (or ms, µs, ns: see Fields.Time) with
// an optional fraction.
func epoch(v []byte) (int64, error) {
	if len(v) == 0 || len(v) > 40 {
		return 0, errBadTime
	}
	var whole int64
	i := 0
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if whole > (1<<62)/10 {
			return 0, errRange
		}
		whole = whole*10 + int64(v[i]-'0')
	}
	if i == 0 {
		return 0, errBadTime
	}
	var frac, scale int64 = 0, 1
	if i < len(v) && v[i] == '.' {
		i++
		for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
			if scale < 1e9 {
				frac = frac*10 + int64(v[i]-'0')
				scale *= 10
			}
		}
	}
	if i != len(v) {
		return 0, errBadTime
	}
	unit := int64(time.Second)
	switch {
	case whole > 1e17:
		unit = 1
	case whole > 1e14:
		unit = int64(time.Microsecond)
	case whole > 1e11:
		unit = int64(time.Millisecond)
	}
	// Checked before multiplying: whole x unit must not overflow.
	if whole > maxTime/unit {
		return 0, errRange
	}
	at := whole*unit + frac*unit/scale // frac x unit < 1e18
	if at > maxTime {
		return 0, errRange
	}
	return at, nil
}
