// Package keyval turns the values a request carries into rate-limit keys,
// by the rules that package keyfuncs documents, and holds the error of
// misconfigured key functions: the logic that package keyfuncs, the
// adapter kit (package adapter) and package rules share.
package keyval

import (
	"errors"
	"fmt"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"

	"github.com/ratekit/ratekit/core"
)

// ErrMisconfigured is keyfuncs.ErrMisconfigured: wrapped by the errors of
// key functions built with bad arguments, and of client-IP keys used where
// they cannot be safe.
var ErrMisconfigured = errors.New("keyfuncs: misconfigured key function")

// Misconfigured returns a configuration error, wrapping ErrMisconfigured.
func Misconfigured(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMisconfigured}, args...)...)
}

// HeaderKey returns the function that turns the value of the named header
// (its first value, or "" if it is absent) into a key, as keyfuncs.Header
// does: the value with surrounding white space removed, which may share
// its memory. An empty or blank value is an error wrapping
// core.ErrMissingKey that names the header. An empty name gives a function
// that fails with ErrMisconfigured.
func HeaderKey(name string) func(value string) (string, error) {
	if name == "" {
		err := Misconfigured("Header: empty header name")
		return func(string) (string, error) { return "", err }
	}
	errMissing := fmt.Errorf("keyfuncs: header %q: %w", textproto.CanonicalMIMEHeaderKey(name), core.ErrMissingKey)
	return func(value string) (string, error) {
		if v := strings.TrimSpace(value); v != "" {
			return v, nil
		}
		return "", errMissing
	}
}

// ValueKey returns the function that turns a value the application stored
// for a request (nil if it is absent) into a key, as keyfuncs.ContextValue
// does. The value may be a string, a fmt.Stringer, any integer type, or
// any type whose underlying type is a string or integer type; integers are
// formatted in decimal, and a string key may share the value's memory. An
// absent or nil value (including a nil pointer, map, slice, function or
// channel), or one that gives a blank string, is an error wrapping
// core.ErrMissingKey: "<what>: ratekit: request has no rate-limit key". A
// value of any other type is an error that does not wrap it:
// "<what> has unsupported type T".
func ValueKey(what string) func(v any) (string, error) {
	errMissing := fmt.Errorf("%s: %w", what, core.ErrMissingKey)
	return func(v any) (string, error) {
		k, ok := valueString(v)
		if !ok {
			return "", fmt.Errorf("%s has unsupported type %T", what, v)
		}
		if strings.TrimSpace(k) == "" {
			return "", errMissing
		}
		return k, nil
	}
}

// valueString converts a stored value to a key. It reports false if v has
// an unsupported type. Absent and nil values yield "", true.
func valueString(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case uint:
		return strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return "", true
		}
	}
	if s, ok := v.(fmt.Stringer); ok {
		return s.String(), true
	}
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), true
	}
	return "", false
}
