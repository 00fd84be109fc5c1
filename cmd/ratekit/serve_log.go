package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// newLogger returns the logger of ratekit serve on w: JSON lines, or
// lines of text (lineHandler).
func newLogger(w io.Writer, level slog.Level, asJSON bool) *slog.Logger {
	if asJSON {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(&lineHandler{w: w, mu: &sync.Mutex{}, level: level})
}

// lineHandler writes each record as one line of text: the message, then
// the attributes as key=value, values quoted when they hold spaces,
// quotes, '=' or characters that are not printable. A record of a level
// other than INFO starts with its level ("WARN ..."). It writes no time:
// the supervisor's log (journald, Docker, Kubernetes) stamps each line.
// So the ready line reads "ratekit serve: listening grpc=ADDR http=ADDR".
type lineHandler struct {
	w      io.Writer
	mu     *sync.Mutex
	level  slog.Level
	prefix string // the group of the attributes to come, with a trailing "."
	attrs  string // attributes of WithAttrs, formatted
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if r.Level != slog.LevelInfo {
		b.WriteString(r.Level.String())
		b.WriteByte(' ')
	}
	b.WriteString(strings.Map(func(c rune) rune {
		if c == '\n' || c == '\r' {
			return ' '
		}
		return c
	}, r.Message))
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.prefix, a)
	}
	c := *h
	c.attrs = b.String()
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix += name + "."
	return &c
}

// appendAttr writes " key=value" for a, or one such pair per member of a
// group.
func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, m := range v.Group() {
			appendAttr(b, p, m)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(prefix)
	b.WriteString(a.Key)
	b.WriteByte('=')
	var s string
	switch v.Kind() {
	case slog.KindTime:
		s = v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		s = fmt.Sprint(v.Any())
	default:
		s = v.String()
	}
	b.WriteString(quoteValue(s))
}

// quoteValue quotes s when it would not read back as one value.
func quoteValue(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool {
		return r == ' ' || r == '"' || r == '=' || !unicode.IsPrint(r)
	}) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
