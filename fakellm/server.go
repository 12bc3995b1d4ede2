package fakellm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrInvalidOptions: New was given options it cannot serve.
	ErrInvalidOptions = errors.New("invalid fakellm options")
	// ErrClosed: the server closed while a caller was waiting on it.
	ErrClosed = errors.New("fakellm server closed")
	// ErrCloseTimeout: CloseContext's context ended with connections or handlers still open.
	ErrCloseTimeout = errors.New("fakellm close timed out")
)

// maxBody bounds a request body; a larger one is refused with 413.
const maxBody = 64 << 20

// Options configure a Server. The zero value accepts any key on a loopback port.
type Options struct {
	Keys         []string  // accepted keys (one or a set); empty accepts any key, or none
	Addr         string    // listen address; default "127.0.0.1:0"
	AdvertiseURL string    // base URL to advertise instead of the listen address (staging); a bare scheme and host gets the listener's port and /v1
	Model        string    // model listed by GET <base>/models and echoed when a request names none; default "fakellm"
	Responder    Responder // main requests, once the script is empty
	AuxResponder Responder // aux requests (never consume the script); default: a short text
	Script       []Response
	Journal      io.Writer // if set, a first journal (see Server.Journal)
	// ReplyCanary, if set, is stamped on every text and tool-call answer:
	// appended to its text (" [<canary>]") and to each tool-call id
	// ("<id>-<canary>"). An answer that reaches another tenant then carries
	// a canary that is not that tenant's.
	ReplyCanary string
	// TurnBound, if positive, bounds the model requests of one user turn
	// (Record.Turn): a main request past it is answered with LoopedText,
	// whatever the script or responder would say, so a target that never
	// sees its tool results as answered cannot loop for ever.
	TurnBound int
}

// Server is one fake provider: a real HTTP server on its own port, recording
// every request and answering from its script. It is safe for concurrent use.
type Server struct {
	URL     string // http://HOST:PORT of the listener
	BaseURL string // URL+"/v1", or Options.AdvertiseURL

	model   string
	keys    map[string]struct{}
	resp    Responder
	aux     Responder
	srv     *http.Server
	nonce   string
	reply   string
	bound   int
	ids     atomic.Int64
	done    chan struct{} // closed by Close: every hang, stall and delay ends
	served  chan struct{} // closed when Serve returned
	closing sync.Once

	mu       sync.Mutex
	records  []Record
	script   []Response
	changed  chan struct{} // closed and cleared on each arrival, made by waiters
	journals []io.Writer   // nil entries failed and were dropped
	jerr     error
	conns    int
	handlers int
	closed   bool
	idle     chan struct{} // closed when closed and no conn or handler remains
}

// New starts a server listening on opts.Addr.
func New(opts Options) (*Server, error) {
	s := &Server{
		model:  opts.Model,
		reply:  opts.ReplyCanary,
		bound:  opts.TurnBound,
		keys:   make(map[string]struct{}, len(opts.Keys)),
		resp:   opts.Responder,
		aux:    opts.AuxResponder,
		script: append([]Response(nil), opts.Script...),
		done:   make(chan struct{}),
		served: make(chan struct{}),
		idle:   make(chan struct{}),
	}
	if s.model == "" {
		s.model = "fakellm"
	}
	if opts.Journal != nil {
		s.journals = []io.Writer{opts.Journal}
	}
	for i, k := range opts.Keys {
		if k == "" {
			return nil, fmt.Errorf("fakellm: key #%d is empty (leave Keys empty to accept any key): %w", i, ErrInvalidOptions)
		}
		s.keys[k] = struct{}{}
	}
	var nonce [4]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("fakellm: read random id: %w", err)
	}
	s.nonce = hex.EncodeToString(nonce[:])

	advertise := strings.TrimRight(opts.AdvertiseURL, "/")
	if advertise != "" {
		u, err := url.Parse(advertise)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("fakellm: advertise url %q is not an absolute http(s) URL: %w", opts.AdvertiseURL, ErrInvalidOptions)
		}
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakellm: listen on %s: %w", addr, err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.BaseURL = s.URL + "/v1"
	if advertise != "" {
		s.BaseURL = withPort(advertise, ln.Addr())
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState:         s.connState,
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

// Close stops the server: every hang, stall and stream ends at once, every
// connection is closed, and Close returns only when every goroutine the
// server started is gone. It is safe to call more than once.
func (s *Server) Close() { _ = s.CloseContext(context.Background()) }

// CloseContext is Close with a bound: if ctx ends first it returns an error
// (wrapping ErrCloseTimeout and ctx's error) naming what is still open.
func (s *Server) CloseContext(ctx context.Context) error {
	s.closing.Do(func() {
		close(s.done)
		_ = s.srv.Close() // closes the listener and every connection
		s.mu.Lock()
		s.closed = true
		s.checkIdleLocked()
		s.mu.Unlock()
	})
	for _, c := range []chan struct{}{s.served, s.idle} {
		select {
		case <-c:
		case <-ctx.Done():
			s.mu.Lock()
			conns, handlers := s.conns, s.handlers
			s.mu.Unlock()
			return fmt.Errorf("fakellm: close %s: %d connection(s) and %d handler(s) still open: %w: %w",
				s.URL, conns, handlers, ErrCloseTimeout, ctx.Err())
		}
	}
	return nil
}

// connState counts connections from accept to close (or hijack).
func (s *Server) connState(_ net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns++
	case http.StateClosed, http.StateHijacked:
		s.conns--
		s.checkIdleLocked()
	}
}

func (s *Server) checkIdleLocked() {
	if s.closed && s.conns == 0 && s.handlers == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
}

// Enqueue appends responses to the script of main requests.
func (s *Server) Enqueue(r ...Response) {
	s.mu.Lock()
	s.script = append(s.script, r...)
	s.mu.Unlock()
}

// DropScript discards the scripted responses not yet consumed and returns
// how many there were (a failure a scenario scripted for retries that
// never came).
func (s *Server) DropScript() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.script)
	s.script = nil
	return n
}

// ScriptLeft is the number of scripted responses not yet consumed.
func (s *Server) ScriptLeft() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// Requests returns copies of every record, in arrival order.
func (s *Server) Requests() []Record { return s.RequestsOf("") }

// RequestsOf returns copies of the records of kind k ("" for all), in arrival order.
func (s *Server) RequestsOf(k Kind) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copiesLocked(k)
}

// RequestsShared is RequestsOf without the deep copies: each Record is a
// copy of the server's as it stands now (its Status and Response), but
// its body, decoded body, headers and calls are the server's own, which
// it never changes once a request is recorded. For readers only: a
// caller that changes one of them changes the server's record. A check
// that reads every record after every phase spends most of its time
// copying bodies it only reads.
func (s *Server) RequestsShared(k Kind) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recordsLocked(k, false)
}

// LastSeq is the sequence number of the last request that arrived, and
// false when none has: what Requests would end with, without copying
// every record.
func (s *Server) LastSeq() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.records) == 0 {
		return 0, false
	}
	return s.records[len(s.records)-1].Seq, true
}

func (s *Server) copiesLocked(k Kind) []Record { return s.recordsLocked(k, true) }

// recordsLocked is the records of kind k ("" for all), in arrival order:
// deep copies (clone), or copies sharing their bodies with the server.
func (s *Server) recordsLocked(k Kind, clone bool) []Record {
	out := make([]Record, 0, len(s.records))
	for i := range s.records {
		switch {
		case k != "" && s.records[i].Kind != k:
		case clone:
			out = append(out, s.records[i].clone())
		default:
			out = append(out, s.records[i])
		}
	}
	return out
}

// WaitRequests blocks until at least n requests of kind k ("" for any) have
// arrived, then returns copies of all of them. Records of requests still in
// flight have Status 0. It fails when ctx ends or the server closes first,
// naming what it waited for and what it saw.
func (s *Server) WaitRequests(ctx context.Context, k Kind, n int) ([]Record, error) {
	for {
		s.mu.Lock()
		got := s.copiesLocked(k)
		if len(got) >= n {
			s.mu.Unlock()
			return got, nil
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		last := "none"
		if len(s.records) > 0 {
			r := s.records[len(s.records)-1]
			last = fmt.Sprintf("#%d %s %s %s %q", r.Seq, r.Kind, r.Method, r.Path, r.Response)
		}
		s.mu.Unlock()
		what := "request(s)"
		if k != "" {
			what = string(k) + " request(s)"
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return got, fmt.Errorf("fakellm: wait for %d %s on %s: have %d, last arrival %s: %w", n, what, s.BaseURL, len(got), last, ctx.Err())
		case <-s.done:
			return got, fmt.Errorf("fakellm: wait for %d %s on %s: have %d, last arrival %s: %w", n, what, s.BaseURL, len(got), last, ErrClosed)
		}
	}
}

// Journal adds w as a journal: every record is written to it as one JSON
// line, once when the request arrives and again when its response is
// settled (ReadJournal keeps the last line per request). Records already
// held are written first, so a late journal misses nothing. Writes happen
// under the server's lock, in order. A journal whose write fails is dropped
// and its error kept: see JournalErr.
func (s *Server) Journal(w io.Writer) {
	if w == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journals = append(s.journals, w)
	for i := range s.records {
		s.writeJournal(len(s.journals)-1, &s.records[i])
	}
}

// JournalErr is the first error writing a journal, if any.
func (s *Server) JournalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jerr
}

func (s *Server) journalLocked(r *Record) {
	for i := len(s.journals) - 1; i >= 0; i-- {
		s.writeJournal(i, r)
	}
}

// writeJournal writes r to journal i, dropping the journal if that fails.
func (s *Server) writeJournal(i int, r *Record) {
	w := s.journals[i]
	if w == nil {
		return
	}
	b, err := json.Marshal(r)
	if err == nil {
		_, err = w.Write(append(b, '\n'))
	}
	if err != nil {
		s.journals[i] = nil
		if s.jerr == nil {
			s.jerr = fmt.Errorf("fakellm: journal record #%d of %s: %w", r.Seq, s.BaseURL, err)
		}
	}
}

// add appends r to the log (setting its Seq) and wakes waiters.
func (s *Server) add(r *Record) {
	s.mu.Lock()
	r.Seq = len(s.records)
	s.records = append(s.records, *r)
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.journalLocked(r)
	s.mu.Unlock()
}

// settle notes what was sent for request seq.
func (s *Server) settle(seq, status int, label string, u *Usage, calls []string) {
	s.mu.Lock()
	r := &s.records[seq]
	r.Status, r.Response, r.Usage, r.Calls = status, label, u, calls
	s.journalLocked(r)
	s.mu.Unlock()
}

// next is the answer to r, stamped with the reply canary.
func (s *Server) next(r *Record) Response { return s.stamp(s.answer(r)) }

// stamp appends the reply canary to a text answer's text (tool-call ids
// get it when they are made).
func (s *Server) stamp(r Response) Response {
	if s.reply == "" || (r.shape != shapeText && r.shape != shapeTools) {
		return r
	}
	switch {
	case r.Text != "":
		r.Text += " [" + s.reply + "]"
	case r.shape == shapeText:
		r.Text = "[" + s.reply + "]"
	}
	return r
}

// answer pops the script, or asks the responders.
func (s *Server) answer(r *Record) Response {
	if r.Kind == KindMain && s.bound > 0 && r.Looped(s.bound) {
		return Text(fmt.Sprintf("%s (%d requests for one user turn, bound %d)", LoopedText, r.Turn().Requests, s.bound))
	}
	if r.Kind == KindMain {
		s.mu.Lock()
		if len(s.script) > 0 {
			out := s.script[0]
			s.script[0] = Response{}
			s.script = s.script[1:]
			s.mu.Unlock()
			return out
		}
		s.mu.Unlock()
		if s.resp != nil {
			if out := s.resp(r.clone()); !out.IsZero() {
				return out
			}
		}
		return Error(http.StatusInternalServerError,
			fmt.Sprintf("fakellm: main request #%d arrived with the script empty and no responder", r.Seq))
	}
	if s.aux != nil {
		if out := s.aux(r.clone()); !out.IsZero() {
			return out
		}
	}
	return Text("fakellm aux reply")
}

// keyOK reports whether the presented key is accepted.
func (s *Server) keyOK(key string) bool {
	if len(s.keys) == 0 {
		return true
	}
	_, ok := s.keys[key]
	return ok
}

// newID returns a server-unique id with the given prefix.
func (s *Server) newID(prefix string) string {
	b := make([]byte, 0, len(prefix)+len(s.nonce)+8)
	b = append(b, prefix...)
	b = append(b, s.nonce...)
	b = strconv.AppendInt(b, s.ids.Add(1), 10)
	return string(b)
}

// pause waits d (0: without bound) and reports whether it elapsed; false
// means the client left or the server is closing.
func (s *Server) pause(ctx context.Context, d time.Duration) bool {
	var tick <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-tick:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// withPort completes an advertised URL that is a bare scheme and host
// ("http://staging-runner"): it gets the listener's port and /v1, so many
// providers on port 0 can share one advertised host. A URL with a port or
// a path is a proxy's and is taken as it is.
func withPort(advertise string, addr net.Addr) string {
	u, err := url.Parse(advertise)
	if err != nil || u.Port() != "" || (u.Path != "" && u.Path != "/") {
		return advertise
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(tcp.Port))
	}
	u.Path = "/v1"
	return u.String()
}
