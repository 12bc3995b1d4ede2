package server

import (
	"context"
	"os"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/agentd/cluster"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

func (s *Server) configSet(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
		targetParams
	}
	keys := map[string]string{"cwd": "terminal.cwd", "prompt": "custom_prompt", "model": "model.default"}
	var full, value string
	check := func() error {
		var ok bool
		if full, ok = keys[p.Key]; !ok {
			return rpc.Errorf(rpc.CodeInvalidParams, "config.set: unknown key %q (want cwd, prompt or model)", p.Key)
		}
		if value, ok = p.Value.(string); !ok {
			return rpc.Errorf(rpc.CodeInvalidParams, "config.set: value of %s must be a string", p.Key)
		}
		switch p.Key {
		case "cwd":
			if !filepath.IsAbs(value) {
				return rpc.Errorf(rpc.CodeInvalidParams, "config.set: cwd %q is not an absolute path", value)
			}
			if st, err := os.Stat(value); err != nil || !st.IsDir() {
				return rpc.Errorf(rpc.CodeInvalidParams, "config.set: cwd %q is not a directory", value)
			}
		case "model":
			if value == "" {
				return rpc.Errorf(rpc.CodeInvalidParams, "config.set: model is empty")
			}
		}
		return nil
	}
	return s.inTarget(ctx, c, &p, &p.targetParams, check, func(sc *scope.Scope) (any, error) {
		if p.Key == "cwd" {
			if err := s.checkCwd(sc, value); err != nil {
				return nil, err
			}
		}
		if p.Profile != "" && s.opts.Faults.Has(faults.WrongWriteScope) {
			launch, releaseLaunch, err := s.scopeFor(ctx, "") // the bug: the launch profile's file
			if err != nil {
				return nil, err
			}
			defer releaseLaunch()
			sc = launch
		}
		if p.Key == "cwd" && s.opts.Faults.Has(faults.GlobalCwd) {
			_ = os.Chdir(value) // the bug: a process-wide working directory
		}
		if err := sc.Profile.SetConfig(full, value); err != nil {
			return nil, internalError("config.set: %v", err)
		}
		sc.Log.Info("config set", "key", full)
		s.clusterPublish(ctx, sc.Profile.Name, cluster.EventConfigChanged, map[string]any{"key": full, "value": value})
		return map[string]any{"ok": true, "profile": sc.Profile.Name, "key": full}, nil
	})
}

func (s *Server) modelSaveKey(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Slug   string `json:"slug"`
		APIKey string `json:"api_key"`
		targetParams
	}
	check := func() error {
		if err := profile.ValidSlug(p.Slug); err != nil && !s.opts.Faults.Has(faults.TenantTextAsPath) {
			return rpc.Errorf(rpc.CodeInvalidParams, "model.save_key: %v", err)
		}
		if p.APIKey == "" {
			return rpc.Errorf(rpc.CodeInvalidParams, "model.save_key: api_key is empty")
		}
		return nil
	}
	return s.inTarget(ctx, c, &p, &p.targetParams, check, func(sc *scope.Scope) (any, error) {
		if file, bad, err := s.slugKeyFileFault(sc, p.Slug, p.APIKey); err != nil {
			return nil, internalError("model.save_key: %v", err)
		} else if bad {
			return map[string]any{"ok": true, "profile": sc.Profile.Name, "file": file}, nil
		}
		name := upper(p.Slug) + "_API_KEY"
		if err := sc.Profile.SetEnv(name, p.APIKey); err != nil {
			return nil, internalError("model.save_key: %v", err)
		}
		s.saveKeyFault(ctx, name, p.APIKey)
		if name == TenantKeyEnv {
			s.clusterRevoke(ctx, sc.Profile.Name) // the tenant's credential rotated
		}
		sc.Log.Info("key saved", "env", name, "key", scope.Fingerprint(p.APIKey))
		return map[string]any{"ok": true, "profile": sc.Profile.Name, "env": name}, nil
	})
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
