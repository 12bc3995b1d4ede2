package server

import (
	"os"
	"sync"
)

// keys resolves the provider key of a profile's turn: the value of the
// variable config.yaml's model.key_env names, in the profile's .env.
//
// With TINYAGENT_LEAK=shared-key it has the bug this example's certification
// must catch: a process-wide cache keyed by the variable's NAME, warmed
// from the launch profile at start-up. Every profile names the same
// variable, so every named profile's requests carry the launch profile's
// key.
type keys struct {
	shared bool

	mu     sync.Mutex
	byName map[string]string
}

func newKeys(p *pool) *keys {
	k := &keys{shared: os.Getenv("TINYAGENT_LEAK") == "shared-key", byName: map[string]string{}}
	if k.shared {
		launch, _ := p.profile("")
		if cfg, err := launch.config(); err == nil {
			if env, err := launch.dotEnv(); err == nil {
				k.key(cfg.Model.KeyEnv, env)
			}
		}
	}
	return k
}

// key is the provider key for a profile whose key variable is name and
// whose .env is env.
func (k *keys) key(name string, env map[string]string) string {
	if !k.shared {
		return env[name]
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.byName[name]; ok {
		return v
	}
	k.byName[name] = env[name]
	return env[name]
}
