package telemetry

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// HTTPTimeouts are the timeouts of every HTTP server supportflow runs (the
// API, the codec gateway, the metrics endpoint), so that no client holds a
// connection, or a goroutine, for as long as it likes: one that never
// finishes its request headers is cut off after ReadHeader, one that never
// finishes its request (headers and body) after Read, a response that
// cannot be written within Write is abandoned, and a keep-alive connection
// idle for Idle is closed.
//
// What each one bounds is net/http's (https://pkg.go.dev/net/http#Server):
// ReadTimeout runs from the connection's first byte of a request to the end
// of its body, WriteTimeout from the end of the request headers to the end
// of the response, IdleTimeout between requests on a keep-alive connection.
// A handler that streams (the API's Server-Sent Events) extends its own
// write deadline per event with http.ResponseController
// (https://pkg.go.dev/net/http#ResponseController.SetWriteDeadline), so a
// stream outlives Write while a stalled client still is cut off.
type HTTPTimeouts struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, headers and body.
	Read time.Duration
	// Write bounds writing a response, from the end of the request's
	// headers; a stream's handler extends it per event.
	Write time.Duration
	// Idle bounds how long a keep-alive connection waits for its next
	// request.
	Idle time.Duration
}

// DefaultHTTPTimeouts are the timeouts of a server built without
// configuration (SUPPORTFLOW_HTTP_*_TIMEOUT's defaults).
var DefaultHTTPTimeouts = HTTPTimeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}

// WithDefaults fills the timeouts left zero from DefaultHTTPTimeouts.
func (t HTTPTimeouts) WithDefaults() HTTPTimeouts {
	d := DefaultHTTPTimeouts
	if t.ReadHeader <= 0 {
		t.ReadHeader = d.ReadHeader
	}
	if t.Read <= 0 {
		t.Read = d.Read
	}
	if t.Write <= 0 {
		t.Write = d.Write
	}
	if t.Idle <= 0 {
		t.Idle = d.Idle
	}
	return t
}

// Check refuses timeouts a server cannot use: each must be positive, and
// the header timeout no longer than the whole request's.
func (t HTTPTimeouts) Check() error {
	if t.ReadHeader <= 0 || t.Read <= 0 || t.Write <= 0 || t.Idle <= 0 {
		return errors.New("every HTTP timeout must be a positive duration")
	}
	if t.ReadHeader > t.Read {
		return fmt.Errorf("the header read timeout (%s) is longer than the request read timeout (%s)", t.ReadHeader, t.Read)
	}
	return nil
}

// Apply sets the timeouts (WithDefaults for those left zero) on s.
func (t HTTPTimeouts) Apply(s *http.Server) *http.Server {
	t = t.WithDefaults()
	s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout = t.ReadHeader, t.Read, t.Write, t.Idle
	return s
}

// Server is an http.Server for h with the timeouts.
func (t HTTPTimeouts) Server(h http.Handler) *http.Server {
	return t.Apply(&http.Server{Handler: h})
}
