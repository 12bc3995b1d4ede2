// Package storeproc starts real Redis and PostgreSQL servers, from the
// machine's own packages, for one run: a private data folder, a loopback
// port, a process group of its own that is killed on every path. The
// harness starts a target's shared stores with it; agentd's cluster tests
// start theirs.
//
//	srv, err := storeproc.Start(ctx, storeproc.Postgres, t.TempDir())
//	defer srv.Stop()
//	conn, err := pgx.Connect(ctx, srv.URL)
//
// PostgreSQL refuses to run as root: started by root, the server and its
// initdb run as the unprivileged user RunAsUser names (nobody by default),
// over a data folder that user owns.
package storeproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// Kind names a store's server program.
type Kind string

// The stores this package starts.
const (
	Redis    Kind = "redis"
	Postgres Kind = "postgres"
)

// Kinds are the kinds Start accepts, for error messages and target files.
var Kinds = []Kind{Redis, Postgres}

// RunAsUser is the user PostgreSQL runs as when the caller is root.
var RunAsUser = "nobody"

// ReadyWithin bounds a server's start, from exec to its first answer.
const ReadyWithin = 30 * time.Second

// stopGrace is how long a server has from SIGTERM (Redis) or SIGINT
// (PostgreSQL's fast shutdown) to exit before it is killed.
const stopGrace = 10 * time.Second

// Server is one running store. Its data folder outlives Stop, so Restart
// brings back what the run stored.
type Server struct {
	Kind Kind
	// URL is what a client connects with: redis://127.0.0.1:PORT/0 or
	// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
	URL  string
	Host string
	Port int
	// Dir is the server's own folder: data, configuration and its log.
	Dir string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *syncio.Buffer
}

// Start starts a store of kind in a new folder below dir (which must
// exist) and returns once it answers a client. A missing program is an
// error that names the package to install.
func Start(ctx context.Context, kind Kind, dir string) (*Server, error) {
	if !slices.Contains(Kinds, kind) {
		return nil, fmt.Errorf("start store: unknown kind %q (want one of %v)", kind, Kinds)
	}
	own, err := os.MkdirTemp(dir, string(kind)+"-")
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", kind, err)
	}
	s := &Server{Kind: kind, Host: "127.0.0.1", Dir: own}
	if kind == Postgres {
		if err := s.initPostgres(ctx); err != nil {
			return nil, err
		}
	}
	// A free port is only free until someone takes it: a start that loses
	// the race is tried again on another.
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", kind, err)
		}
		s.Port = port
		s.URL = s.url()
		if last = s.start(ctx); last == nil {
			return s, nil
		}
		if !strings.Contains(last.Error(), "in use") {
			break
		}
	}
	return nil, last
}

func (s *Server) url() string {
	hostPort := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	if s.Kind == Redis {
		return "redis://" + hostPort + "/0"
	}
	return "postgres://postgres@" + hostPort + "/postgres?sslmode=disable"
}

// Restart stops the server and starts it again on the same folder and
// port: what it stored (Postgres's tables, Redis's last snapshot) is
// back; what was in flight is not.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return fmt.Errorf("restart %s: %w", s.Kind, err)
	}
	return s.start(ctx)
}

// Stop ends the server (a clean shutdown, then a kill after a grace) and
// waits for its process group. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	sig := syscall.SIGTERM
	if s.Kind == Postgres {
		sig = syscall.SIGINT // fast shutdown: end sessions, checkpoint
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(stopGrace):
		_ = procgroup.Kill(cmd.Process.Pid)
		<-done
	}
	// Postgres's own children (its checkpointer, writer) share its group.
	_ = procgroup.Kill(cmd.Process.Pid)
	return nil
}

// Pid is the server's process id, 0 when stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Log is what the server printed, for an error message.
func (s *Server) Log() string {
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

func (s *Server) start(ctx context.Context) error {
	prog, err := program(s.Kind)
	if err != nil {
		return err
	}
	var args []string
	switch s.Kind {
	case Redis:
		// A save point makes Redis snapshot on a clean shutdown:
		// a restart keeps what the run stored.
		args = []string{"--bind", s.Host, "--port", strconv.Itoa(s.Port), "--dir", s.Dir,
			"--dbfilename", "dump.rdb", "--save", "3600 1", "--appendonly", "no", "--protected-mode", "no",
			"--daemonize", "no", "--loglevel", "warning", "--logfile", ""}
	case Postgres:
		args = []string{"-D", filepath.Join(s.Dir, "data"), "-p", strconv.Itoa(s.Port),
			"-c", "listen_addresses=" + s.Host, "-c", "unix_socket_directories=",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=200", "-c", "logging_collector=off"}
	}
	cmd := exec.Command(prog, args...)
	procgroup.Prepare(cmd)
	cmd.Dir = s.Dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C", "LC_ALL=C"}
	if err := s.asUser(cmd); err != nil {
		return err
	}
	s.log = &syncio.Buffer{}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s (%s): %w", s.Kind, prog, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, ReadyWithin)
	defer cancel()
	if err := s.waitReady(rctx, done); err != nil {
		_ = s.Stop()
		return fmt.Errorf("start %s on port %d: %w; its log: %s", s.Kind, s.Port, err, strings.TrimSpace(s.Log()))
	}
	return nil
}

// waitReady polls the server with a real client until it answers, it
// exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		last = s.ping(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the server exited before it answered")
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func (s *Server) ping(ctx context.Context) error {
	switch s.Kind {
	case Redis:
		c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), MaxRetries: -1})
		defer c.Close()
		return c.Ping(ctx).Err()
	default:
		c, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		return c.Ping(ctx)
	}
}

// initPostgres makes the data folder with initdb: trust authentication on
// loopback for the superuser postgres (the folder and port are the run's
// own).
func (s *Server) initPostgres(ctx context.Context) error {
	prog, err := program(Postgres)
	if err != nil {
		return err
	}
	initdb := filepath.Join(filepath.Dir(prog), "initdb")
	if err := s.chownForUser(); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, initdb, "-D", filepath.Join(s.Dir, "data"), "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	procgroup.Prepare(cmd)
	cmd.Dir = s.Dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C", "LC_ALL=C"}
	if err := s.asUser(cmd); err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("start postgres: initdb %s: %w: %s", s.Dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// asUser runs cmd as RunAsUser when the caller is root and the store
// refuses root (PostgreSQL).
func (s *Server) asUser(cmd *exec.Cmd) error {
	if s.Kind != Postgres || os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := lookupUser()
	if err != nil {
		return err
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid}
	return nil
}

// chownForUser gives the server's folder to RunAsUser (when root) and
// lets it through the folders above it inside the temp folder (search
// permission only); a folder above that it cannot pass is an error, never
// a change to the machine's own folders.
func (s *Server) chownForUser() error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := lookupUser()
	if err != nil {
		return err
	}
	if err := os.Chown(s.Dir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("start postgres: give %s to %s: %w", s.Dir, RunAsUser, err)
	}
	for d := filepath.Dir(s.Dir); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("start postgres: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if !within(d, os.TempDir()) {
				return fmt.Errorf("start postgres as root: %s cannot pass %s (mode %v): start it below %s", RunAsUser, d, fi.Mode().Perm(), os.TempDir())
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("start postgres: let %s through %s: %w", RunAsUser, d, err)
			}
		}
	}
	return nil
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func lookupUser() (uint32, uint32, error) {
	u, err := user.Lookup(RunAsUser)
	if err != nil {
		return 0, 0, fmt.Errorf("start postgres as root: look up user %s (PostgreSQL refuses root): %w", RunAsUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("start postgres as root: user %s has ids %q/%q", RunAsUser, u.Uid, u.Gid)
	}
	return uint32(uid), uint32(gid), nil
}

// program finds the server's binary: redis-server on PATH; postgres on
// PATH or in Debian's /usr/lib/postgresql/VERSION/bin (the newest).
func program(kind Kind) (string, error) {
	switch kind {
	case Redis:
		if p, err := exec.LookPath("redis-server"); err == nil {
			return p, nil
		}
		return "", errors.New("start redis: redis-server not found on PATH (Debian: apt-get install redis-server)")
	default:
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
		slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
		if len(dirs) > 0 {
			return dirs[0], nil
		}
		if p, err := exec.LookPath("postgres"); err == nil {
			return p, nil
		}
		return "", errors.New("start postgres: no postgres binary on PATH or in /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)")
	}
}

func versionOf(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// Available says whether kind's program is installed, and why not.
func Available(kind Kind) error {
	_, err := program(kind)
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
