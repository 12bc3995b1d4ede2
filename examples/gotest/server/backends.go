package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// serveStdio serves one connection on stdin and stdout, a frame a line,
// until stdin ends or the server is stopped.
func serveStdio(ctx context.Context, p *pool, stdin io.Reader, stdout io.Writer) error {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	c := &conn{pool: p, ctx: ctx, write: func(b []byte) error {
		_, err := stdout.Write(append(b, '\n'))
		return err
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.serve(func() ([]byte, error) {
			if !sc.Scan() {
				if err := sc.Err(); err != nil {
					return nil, err
				}
				return nil, io.EOF
			}
			return sc.Bytes(), nil
		})
	}()
	select {
	case <-done:
	case <-ctx.Done(): // stopped: the turns end with the context; stdin may never close
		c.turns.Wait()
	}
	return nil
}

// serveWebsocket serves every profile on one websocket server (pooled
// mode): /api/ws?token=T, and a public /api/health. It fires due cron jobs
// every interval, and stops when ctx ends.
func serveWebsocket(ctx context.Context, p *pool, host, port string, interval time.Duration, stdout io.Writer) error {
	token := os.Getenv("TINYAGENT_TOKEN")
	if token == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
		fmt.Fprintln(os.Stderr, "tinyagent: TINYAGENT_TOKEN is not set; this run's token is", token)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var (
		conns sync.WaitGroup
		mu    sync.Mutex
		open  = map[*websocket.Conn]bool{}
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /api/ws", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("token")), []byte(token)) != 1 {
			http.Error(w, "missing or wrong token", http.StatusUnauthorized)
			return
		}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return // the upgrader answered the client
		}
		mu.Lock()
		open[ws] = true
		mu.Unlock()
		conns.Add(1)
		defer conns.Done()
		defer func() {
			mu.Lock()
			delete(open, ws)
			mu.Unlock()
			ws.Close()
		}()
		c := &conn{pool: p, ctx: ctx, write: func(b []byte) error { return ws.WriteMessage(websocket.TextMessage, b) }}
		c.serve(func() ([]byte, error) {
			_, data, err := ws.ReadMessage()
			return data, err
		})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	var cron sync.WaitGroup
	cron.Go(func() { p.cronLoop(ctx, interval) })
	fmt.Fprintf(stdout, "backend listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		mu.Lock()
		for ws := range open {
			ws.Close() // its reader ends; its turns end with ctx
		}
		mu.Unlock()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	conns.Wait()
	cron.Wait()
	return nil
}

func (p *pool) cronLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.tick(ctx)
		}
	}
}
