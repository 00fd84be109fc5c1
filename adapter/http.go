package adapter

import "net/http"

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
