package standin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault describes one misbehaviour a stand-in applies to matching requests.
//
// A request matches when both Method and Path match. A matched fault runs in
// this order: Arrived is notified, Delay is slept, then either Status is
// answered (the request is not applied) or the request is applied, after
// which DelayAfterApply is slept and, with DropAfterApply, the connection is
// closed instead of answering.
type Fault struct {
	// Method is the HTTP method to match; "" matches any method.
	Method string
	// Path is the exact URL path to match, or a prefix when it ends in "*";
	// "" matches any path.
	Path string
	// Times is how many matching requests the fault applies to: 0 means 1,
	// a negative value means forever.
	Times int
	// Status, if non-zero, is answered instead of applying the request, with
	// a JSON error body in the service's own format.
	Status int
	// RetryAfter, with Status, sets the Retry-After header in whole seconds
	// (rounded up).
	RetryAfter time.Duration
	// Delay is slept before handling. The request is applied afterwards even
	// if the client has gone away, as a real server would.
	Delay time.Duration
	// DelayAfterApply is slept after the request was applied and before the
	// response is sent.
	DelayAfterApply time.Duration
	// DropAfterApply applies the request, then closes the connection without
	// any response: a write that landed and lost its response.
	DropAfterApply bool
	// Arrived, if non-nil, receives the request path (non-blocking send) when
	// a matching request arrives, so a test can act mid-call.
	Arrived chan<- string
}

// matches reports whether f selects r.
func (f *Fault) matches(r *http.Request) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, r.Method) {
		return false
	}
	switch {
	case f.Path == "":
		return true
	case strings.HasSuffix(f.Path, "*"):
		return strings.HasPrefix(r.URL.Path, strings.TrimSuffix(f.Path, "*"))
	default:
		return r.URL.Path == f.Path
	}
}

// faultQueue is a concurrency-safe list of injected faults of one kind,
// matched in injection order, each applying to its Times requests (0 means
// 1, negative forever).
type faultQueue[F any] struct {
	mu      sync.Mutex
	entries []*queuedFault[F]
}

type queuedFault[F any] struct {
	fault     F
	remaining int // negative: unlimited
}

func (q *faultQueue[F]) inject(f F, times int) {
	if times == 0 {
		times = 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = append(q.entries, &queuedFault[F]{fault: f, remaining: times})
}

func (q *faultQueue[F]) clear() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = nil
}

// take returns a copy of the first fault that applies and consumes one of
// its uses, or nil when none does.
func (q *faultQueue[F]) take(applies func(*F) bool) *F {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, e := range q.entries {
		if !applies(&e.fault) {
			continue
		}
		f := e.fault
		if e.remaining > 0 {
			e.remaining--
			if e.remaining == 0 {
				q.entries = append(q.entries[:i:i], q.entries[i+1:]...)
			}
		}
		return &f
	}
	return nil
}

// Faults is a concurrency-safe list of injected faults. The zero value is
// ready to use. Faults are matched in injection order.
type Faults struct {
	q faultQueue[Fault]
}

// Inject adds f after every fault injected before it.
func (fs *Faults) Inject(f Fault) { fs.q.inject(f, f.Times) }

// Clear removes every injected fault.
func (fs *Faults) Clear() { fs.q.clear() }

// match returns a copy of the first fault that selects r and consumes one of
// its uses, or nil when no fault applies.
func (fs *Faults) match(r *http.Request) *Fault {
	return fs.q.take(func(f *Fault) bool { return f.matches(r) })
}

// errorBodyFunc renders a service-specific JSON error body for a status.
type errorBodyFunc func(status int) any

// maxFaultBody bounds how much of a request body is buffered before a delay.
const maxFaultBody = 4 << 20

// serveWithFault runs next for r under fault f (which may be nil).
func serveWithFault(w http.ResponseWriter, r *http.Request, f *Fault, errBody errorBodyFunc, next http.Handler) {
	if f == nil {
		next.ServeHTTP(w, r)
		return
	}
	if f.Arrived != nil {
		select {
		case f.Arrived <- r.URL.Path:
		default:
		}
	}
	// Read the body now so that the request can still be applied after a
	// delay during which the client may have hung up.
	if r.Body != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxFaultBody))
		if err == nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
	}
	// Real servers keep working on a request whose client has gone away, so
	// the handler must not observe the cancellation either.
	r = r.WithContext(context.WithoutCancel(r.Context()))
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	if f.Status != 0 {
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(f.RetryAfter), 10))
		}
		writeJSON(w, f.Status, errBody(f.Status))
		return
	}
	if f.DelayAfterApply <= 0 && !f.DropAfterApply {
		next.ServeHTTP(w, r)
		return
	}
	// Buffer the response so that nothing reaches the client before the
	// after-apply fault has run.
	buf := &bufferedResponse{header: make(http.Header)}
	next.ServeHTTP(buf, r)
	if f.DelayAfterApply > 0 {
		time.Sleep(f.DelayAfterApply)
	}
	if f.DropAfterApply {
		dropConnection(w)
		return
	}
	buf.copyTo(w)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// dropConnection closes the client connection without writing a response.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
		return
	}
	// HTTP/2 and other writers cannot be hijacked; aborting the handler
	// makes net/http reset the stream or close the connection instead.
	panic(http.ErrAbortHandler)
}

// bufferedResponse is an http.ResponseWriter that keeps the response in
// memory until copyTo is called.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// copyTo sends the buffered response to w.
func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	status := b.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(b.body.Bytes())
}

// Server is a stand-in running on a real listener, for use outside httptest
// (the local run, a worker in another process).
type Server struct {
	srv *http.Server
	url string

	closeOnce sync.Once
	closeErr  error
	served    chan error
}

// Listen serves h on addr (for example "127.0.0.1:0") until Close.
func Listen(h http.Handler, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
		},
		url:    "http://" + ln.Addr().String(),
		served: make(chan error, 1),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// URL returns the base URL of the server, such as "http://127.0.0.1:41234".
func (s *Server) URL() string { return s.url }

// Close stops the server at once, closing its listener and connections.
// Handlers still sleeping in a fault finish in the background. Calling Close
// again returns the first result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.srv.Close()
		if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}
