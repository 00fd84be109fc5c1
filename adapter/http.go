package adapter

import (
	"net/http"

	"github.com/ratekit/ratekit/core"
)

// SetField sets the field name of h to v, or removes it when v is nil: the
// Port.Header of a framework whose response is an http.ResponseWriter.
func SetField(h http.Header, name string, v []string) {
	if v == nil {
		delete(h, name)
		return
	}
	h[name] = v
}

// WriteBody writes status and body to w: the Port.Write of a framework
// whose response is an http.ResponseWriter.
func WriteBody(w http.ResponseWriter, status int, body []byte) error {
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// NoError turns a handler that returns nothing, as Gin's and net/http's
// do, into one of Config.Denied's or Config.OnError's form; nil stays nil.
func NoError[C, T any](f func(C, T)) func(C, T) error {
	if f == nil {
		return nil
	}
	return func(c C, t T) error { f(c, t); return nil }
}

// Kept returns the decision that a port's Keep stored as v, a
// *core.Decision, wherever the framework keeps request values: the body
// of an adapter's DecisionFrom. It reports false when v is anything else,
// as when nothing was stored.
func Kept(v any) (core.Decision, bool) {
	d, ok := v.(*core.Decision)
	if !ok {
		return core.Decision{}, false
	}
	return *d, true
}
