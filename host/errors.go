package host

import (
	"context"
	"errors"
)

// Sentinel errors. Every error a Manager returns names the plugin host and
// wraps one of these where one applies.
var (
	// ErrUnavailable: the plugin host is not running (it died, or it could
	// not start).
	ErrUnavailable = errors.New("plugin host unavailable")
	// ErrUnsupported: the boundary cannot carry what was asked.
	ErrUnsupported = errors.New("unsupported across the plugin host boundary")
	// ErrTimeout: the call's deadline passed before the plugin answered.
	ErrTimeout = errors.New("plugin host call timed out")
	// ErrPlugin: the plugin itself returned an error or panicked.
	ErrPlugin = errors.New("plugin error")
	// ErrNotFound: no such tool, hook or provider.
	ErrNotFound = errors.New("not found in the plugin host")
	// ErrStaleRef: a reference from an earlier host generation.
	ErrStaleRef = errors.New("stale plugin host reference")
	// ErrProtocol: the peer broke the wire protocol (a bad frame, a bad
	// hello, a wrong version).
	ErrProtocol = errors.New("plugin host protocol error")
	// ErrFrameTooLarge: a frame exceeds the size limit.
	ErrFrameTooLarge = errors.New("plugin host frame too large")
	// ErrBudgetExhausted: the host died too often and is not restarted.
	ErrBudgetExhausted = errors.New("plugin host restart budget exhausted")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("plugin host manager closed")
)

// Code is a typed error's code on the wire.
type Code string

// The wire error codes.
const (
	CodeUnavailable Code = "unavailable"
	CodeUnsupported Code = "unsupported"
	CodeTimeout     Code = "timeout"
	CodePlugin      Code = "plugin"
	CodeNotFound    Code = "not_found"
	CodeStale       Code = "stale"
	CodeProtocol    Code = "protocol"
)

var codeErrs = map[Code]error{
	CodeUnavailable: ErrUnavailable, CodeUnsupported: ErrUnsupported, CodeTimeout: ErrTimeout,
	CodePlugin: ErrPlugin, CodeNotFound: ErrNotFound, CodeStale: ErrStaleRef, CodeProtocol: ErrProtocol,
}

// Error is a typed error that crossed the wire.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool { return codeErrs[e.Code] == target }

// wireError turns err into its wire form, keeping the code of a sentinel it
// wraps and calling anything else the plugin's own.
func wireError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return &Error{Code: we.Code, Message: err.Error()}
	}
	for code, s := range codeErrs {
		if errors.Is(err, s) {
			return &Error{Code: code, Message: err.Error()}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeTimeout, Message: err.Error()}
	}
	return &Error{Code: CodePlugin, Message: err.Error()}
}

// notSentError marks a request the peer never received whole: the
// connection broke before or while it was written. A torn frame is never
// acted on, so the request may be sent to the host that replaces this one.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// notSent reports whether err says the request never reached the peer.
func notSent(err error) bool {
	var ns notSentError
	return errors.As(err, &ns)
}
