package fakellm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// API names recorded in Record.API.
const (
	apiOpenAI    = "openai"
	apiAnthropic = "anthropic"
	apiModels    = "models"
	apiUnknown   = "unknown"
)

var errTooLarge = errors.New("request body over the 64 MiB limit")

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// serve is the one handler: record first, then check the key, then answer.
func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		abort(w)
		return
	}
	s.handlers++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.handlers--
		s.checkIdleLocked()
		s.mu.Unlock()
	}()

	rec := Record{Server: s.BaseURL, Time: time.Now(), Method: req.Method, Path: req.URL.Path, API: apiOf(req.URL.Path)}
	rec.Auth = authOf(req)
	rec.Headers = headersOf(req.Header)
	body, readErr := readBody(w, req)
	rec.RawBody = body
	if len(body) > 0 && body[0] == '{' {
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			rec.Body = m
		}
	}
	if tools, ok := rec.Body["tools"].([]any); ok && len(tools) > 0 {
		rec.Kind = KindMain
	} else {
		rec.Kind = KindAux
	}
	rec.Stream, _ = rec.Body["stream"].(bool)
	s.add(&rec)

	if !s.keyOK(rec.Auth) {
		msg := "Incorrect API key provided"
		if rec.Auth == "" {
			msg = "No API key provided"
		}
		s.finish(req.Context(), w, &rec, Error(http.StatusUnauthorized, msg))
		return
	}
	switch {
	case readErr != nil:
		status := http.StatusBadRequest
		if errors.Is(readErr, errTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		s.finish(req.Context(), w, &rec, Error(status, "fakellm: read request body: "+readErr.Error()))
	case rec.API == apiUnknown:
		s.finish(req.Context(), w, &rec, Error(http.StatusNotFound, "fakellm: no route for "+req.Method+" "+req.URL.Path+" (serves <base>/chat/completions, <base>/messages, <base>/models)"))
	case rec.API == apiModels:
		if req.Method != http.MethodGet {
			s.finish(req.Context(), w, &rec, Error(http.StatusMethodNotAllowed, "fakellm: "+req.URL.Path+" takes GET, not "+req.Method))
			return
		}
		s.finish(req.Context(), w, &rec, Raw(http.StatusOK, "application/json", s.modelsBody()))
	case req.Method != http.MethodPost:
		s.finish(req.Context(), w, &rec, Error(http.StatusMethodNotAllowed, "fakellm: "+req.URL.Path+" takes POST, not "+req.Method))
	case rec.Body == nil:
		s.finish(req.Context(), w, &rec, Error(http.StatusBadRequest, "fakellm: request body is not a JSON object"))
	default:
		s.finish(req.Context(), w, &rec, s.next(&rec))
	}
}

// finish renders r for the request, sends it and settles the record.
func (s *Server) finish(ctx context.Context, w http.ResponseWriter, rec *Record, r Response) {
	status, label, usage := 0, r.label(), (*Usage)(nil)
	var ids []string // the tool-call ids sent
	settled := false
	defer func() {
		if !settled {
			s.settle(rec.Seq, status, label, usage, ids)
		}
	}()

	if (r.shape == shapeRaw || r.shape == shapeError) && (r.Status < 200 || r.Status > 999) {
		settled = true // the inner finish settles
		s.finish(ctx, w, rec, Error(http.StatusInternalServerError,
			"fakellm: response #"+strconv.Itoa(rec.Seq)+" has HTTP status "+strconv.Itoa(r.Status)+", want 200-999"))
		return
	}
	h := w.Header()
	switch r.shape {
	case shapeHang:
		s.pause(ctx, r.For)
		abort(w)
		return
	case shapeRaw:
		if r.ContentType != "" {
			h.Set("Content-Type", r.ContentType)
		}
		h.Set("Content-Length", strconv.Itoa(len(r.Body)))
		status = r.Status
		w.WriteHeader(r.Status)
		_, _ = w.Write(r.Body)
		return
	case shapeError:
		if r.RetryAfter > 0 {
			secs := (r.RetryAfter + time.Second - 1) / time.Second
			h.Set("Retry-After", strconv.FormatInt(int64(secs), 10))
			h.Set("Retry-After-Ms", strconv.FormatInt(r.RetryAfter.Milliseconds(), 10))
		}
		bp := bufPool.Get().(*[]byte)
		b := errorBody((*bp)[:0], rec.API, r.Status, r.Message)
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		status = r.Status
		w.WriteHeader(r.Status)
		_, _ = w.Write(b)
		*bp = b
		bufPool.Put(bp)
		return
	case shapeText, shapeTools:
	default:
		r = Error(http.StatusInternalServerError, "fakellm: response #"+strconv.Itoa(rec.Seq)+" has no kind (build it with Text, ToolCall(s), Error, Hang or Raw)")
		settled = true // the inner finish settles
		s.finish(ctx, w, rec, r)
		return
	}

	calls := make([]wireCall, len(r.Calls))
	for i, c := range r.Calls {
		args, err := c.argString()
		if err != nil {
			status, label = http.StatusInternalServerError, "error 500"
			b := errorBody(nil, rec.API, http.StatusInternalServerError, "fakellm: "+err.Error())
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(b)
			return
		}
		calls[i] = wireCall{name: c.Name, args: args, id: c.ID}
		switch {
		case c.ID != "":
		case rec.API == apiAnthropic:
			calls[i].id = s.newID("toolu_")
		default:
			calls[i].id = s.newID("call_")
		}
		if s.reply != "" {
			// The reply canary rides in every call id: servers echo it in
			// tool events, stored turns and the next request.
			calls[i].id += "-" + s.reply
		}
		ids = append(ids, calls[i].id)
	}
	u := r.Usage
	if u == nil {
		out := len(r.Text) + len(r.Reasoning)
		for _, c := range calls {
			out += len(c.name) + len(c.args)
		}
		u = &Usage{PromptTokens: len(rec.RawBody)/4 + 1, CompletionTokens: out/4 + 1}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	} else {
		cp := *u
		u = &cp
	}
	usage = u
	model := rec.Model()
	if model == "" {
		model = s.model
	}
	m := message{model: model, created: rec.Time.Unix(), r: &r, calls: calls, usage: *u}

	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	b := (*bp)[:0]
	var ends []int
	switch {
	case rec.API == apiAnthropic && rec.Stream:
		m.id = s.newID("msg_")
		b, ends = anthropicStream(b, &m)
	case rec.API == apiAnthropic:
		m.id = s.newID("msg_")
		b = anthropicJSON(b, &m)
	case rec.Stream:
		m.id = s.newID("chatcmpl-")
		b, ends = openAIStream(b, &m)
	default:
		m.id = s.newID("chatcmpl-")
		b = openAIJSON(b, &m)
	}
	*bp = b
	var whole bool
	status, whole = s.write(ctx, w, b, ends, &r)
	if !whole {
		label += " (cut)"
	}
}

// write sends a 200 body: whole, or as the stream events ending at ends,
// honouring the response's delay, drop and stall. It returns the status
// sent (0 if none) and whether the whole body was sent.
func (s *Server) write(ctx context.Context, w http.ResponseWriter, b []byte, ends []int, r *Response) (int, bool) {
	h := w.Header()
	if ends == nil {
		if r.Delay > 0 && !s.pause(ctx, r.Delay) {
			abort(w)
			return 0, false
		}
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		if !r.Drop && !r.Stall {
			_, err := w.Write(b)
			return http.StatusOK, err == nil
		}
		_, _ = w.Write(b[:len(b)/2])
		flush(w)
		if r.Stall {
			s.pause(ctx, r.For)
		}
		abort(w)
		return http.StatusOK, false
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	eager := r.Delay > 0 || r.Drop || r.Stall
	start := 0
	for i, end := range ends {
		if (r.Drop || r.Stall) && i == r.After {
			flush(w)
			if r.Stall {
				s.pause(ctx, r.For)
			}
			abort(w)
			return http.StatusOK, false
		}
		if i > 0 && r.Delay > 0 && !s.pause(ctx, r.Delay) {
			abort(w)
			return http.StatusOK, false
		}
		if _, err := w.Write(b[start:end]); err != nil {
			return http.StatusOK, false
		}
		if eager {
			flush(w)
		}
		start = end
	}
	return http.StatusOK, true
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// abort drops the connection without completing the response: the client
// sees EOF (no response) or a truncated body.
func abort(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler) // net/http recovers it and closes the connection
}

func apiOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return apiOpenAI
	case strings.HasSuffix(path, "/messages"):
		return apiAnthropic
	case strings.HasSuffix(path, "/models"):
		return apiModels
	}
	return apiUnknown
}

// authOf is the key presented: the bearer token, else x-api-key.
func authOf(req *http.Request) string {
	if a := req.Header.Get("Authorization"); a != "" {
		if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:])
		}
		return a
	}
	return req.Header.Get("X-Api-Key")
}

func headersOf(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) == 1 {
			out[strings.ToLower(k)] = v[0]
		} else {
			out[strings.ToLower(k)] = strings.Join(v, ", ")
		}
	}
	return out
}

// readBody reads the whole body into a buffer sized from Content-Length.
func readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.ContentLength > maxBody {
		return nil, fmt.Errorf("body of %d bytes: %w", req.ContentLength, errTooLarge)
	}
	if req.ContentLength >= 0 {
		b := make([]byte, req.ContentLength)
		n, err := io.ReadFull(req.Body, b)
		return b[:n], err
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		err = fmt.Errorf("%w: %w", errTooLarge, err)
	}
	return b, err
}
