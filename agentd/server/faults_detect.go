package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

// sharedPluginState is the plugins' state facade under the
// global-plugin-state fault: one map for the whole process, keyed by the
// key alone.
var sharedPluginState = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// pluginState runs do on the state facade's map of sess, under its lock:
// the session's own map, or under the global-plugin-state fault the
// process's one map, where every session's key is one key.
func (s *Server) pluginState(sess *Session, do func(state map[string]string)) {
	if s.opts.Faults.Has(faults.GlobalPluginState) {
		sharedPluginState.Lock()
		defer sharedPluginState.Unlock()
		do(sharedPluginState.m) // the bug: the tenant is not part of the key
		return
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.state == nil {
		sess.state = map[string]string{}
	}
	do(sess.state)
}

// liveSeq numbers live sessions under the sequential-sessions fault.
var liveSeq atomic.Int64

// liveID is a fresh live session id: random, or a counter under the
// sequential-sessions fault.
func (s *Server) liveID() string {
	if s.opts.Faults.Has(faults.SequentialSessions) {
		return "s-" + strconv.FormatInt(liveSeq.Add(1), 10)
	}
	return newLiveID()
}

// resumeScopeFault is sc, or under the resume-any-profile fault the scope
// of whichever profile's state.db holds stored when sc's does not.
func (s *Server) resumeScopeFault(ctx context.Context, sc *scope.Scope, stored string) *scope.Scope {
	if !s.opts.Faults.Has(faults.ResumeAnyProfile) || stored == "" {
		return sc
	}
	if _, err := sc.DB.Session(ctx, stored); err == nil {
		return sc
	}
	list, err := s.opts.Homes.List()
	if err != nil {
		return sc
	}
	for _, p := range list {
		other, err := s.pool.Get(ctx, p.Name)
		if err != nil {
			continue
		}
		if _, err := other.DB.Session(ctx, stored); err == nil {
			return other // the bug: another profile's session
		}
	}
	return sc
}

// saveKeyFault, under the save-key-launch-fallback fault, also writes the
// key to the launch profile's .env when that has no such variable.
func (s *Server) saveKeyFault(ctx context.Context, name, key string) {
	if !s.opts.Faults.Has(faults.SaveKeyLaunchFallback) {
		return
	}
	launch, release, err := s.scopeFor(ctx, "")
	if err != nil {
		return
	}
	defer release()
	env, err := launch.Profile.LoadEnv()
	if err != nil {
		return
	}
	if _, ok := env.Lookup(name); !ok {
		_ = launch.Profile.SetEnv(name, key) // the bug
	}
}

// tmpCopyFault, under the tmp-copy fault, writes a tool result to a file
// in the process's temp folder.
func (s *Server) tmpCopyFault(typ string, payload any) {
	if typ != "tool.complete" || !s.opts.Faults.Has(faults.TmpCopy) {
		return
	}
	m, ok := payload.(map[string]any)
	if !ok {
		return
	}
	out := fmt.Sprint(m["result"])
	path := filepath.Join(os.TempDir(), "agentd-tool-"+newLiveID()+".out")
	_ = os.WriteFile(path, []byte(out), 0o600) // the bug
}

// facadeScope is the scope a plugin's LLM facade call uses: the session's,
// or under the llm-facade-launch-provider fault the launch profile's.
func (s *Server) facadeScope(ctx context.Context, sc *scope.Scope) *scope.Scope {
	if !s.opts.Faults.Has(faults.LLMFacadeLaunchProvider) {
		return sc
	}
	if launch, err := s.pool.Get(ctx, ""); err == nil {
		return launch // the bug
	}
	return sc
}
