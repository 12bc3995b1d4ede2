// The plugins of plugin-surfaces: the Go source every tenant's plugin host
// interprets, and the files they write.

package scenarios

import "strings"

// SurfacesPlugin is the plugin every tenant of plugin-surfaces gets: hooks
// at every point agentd fires them and a memory provider, each writing
// what it was given into the plugin's own home.
const SurfacesPlugin = "canarysurfaces"

// The files the surfaces plugin writes, relative to its host's working
// folder (the profile's home): every hook and memory call, one JSON line
// each, and the memory provider's state.
const (
	surfacesObserved = "surfaces/observed.jsonl"
	surfacesModelLog = "surfaces/model.jsonl" // the model provider's (a plugin of its own)
	surfacesMemory   = "surfaces/memory.json"
)

// SurfacesModel is the model-provider plugin every tenant of
// plugin-surfaces gets, and the model it registers (model.provider:
// plugin:canarysurfaces-model). Its BuildExtraBody records the session it
// builds for and adds surfacesExtra to the request.
const (
	SurfacesModel = "canarysurfaces-model"
	surfacesExtra = "canary_surface"
)

// surfacesImagePrompt starts a user text that makes the responder call
// image_generate with the rest as the prompt.
const surfacesImagePrompt = "IMAGE "

// surfacesHooks are the hook events the plugin registers: every point
// agentd fires hooks at.
var surfacesHooks = []string{"pre_tool_call", "post_tool_call", "pre_llm_call", "post_llm_call", "on_session_start", "on_session_end"}

// surfacesSource is the plugin's Go source, interpreted by yaegi in the
// tenant's plugin host. Its memory provider remembers every turn synced to
// it (in its home) and offers them back on prefetch.
var surfacesSource = `package canarysurfaces

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/plugin"
)

// hostID names this plugin host process: unique where pids are not (every
// host in a PID namespace of its own has the same small pid).
var hostID = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

var mu sync.Mutex

func record(c context.Context, kind, event string, data map[string]any) error {
	mu.Lock()
	defer mu.Unlock()
	if err := os.MkdirAll("surfaces", 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile("` + surfacesObserved + `", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := json.Marshal(map[string]any{"kind": kind, "event": event, "session": plugin.SessionID(c), "pid": os.Getpid(), "host": hostID, "data": data})
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return err
}

type turn struct {
	Session   string ` + "`json:\"session\"`" + `
	User      string ` + "`json:\"user\"`" + `
	Assistant string ` + "`json:\"assistant\"`" + `
}

func remembered() []turn {
	var ts []turn
	b, err := os.ReadFile("` + surfacesMemory + `")
	if err == nil {
		_ = json.Unmarshal(b, &ts)
	}
	return ts
}

type mem struct{}

func (mem) Name() string                         { return "` + SurfacesPlugin + `" }
func (mem) IsAvailable(ctx context.Context) bool { return true }

func (mem) Initialize(ctx context.Context, session string) error {
	return record(ctx, "memory", "initialize", map[string]any{"session_id": session})
}

func (mem) Prefetch(ctx context.Context, query string) (string, error) {
	mu.Lock()
	ts := remembered()
	mu.Unlock()
	var users []string
	for _, t := range ts {
		users = append(users, t.User)
	}
	if err := record(ctx, "memory", "prefetch", map[string]any{"query": query}); err != nil {
		return "", err
	}
	if len(users) == 0 {
		return "", nil
	}
	return "remembered: " + strings.Join(users, " | "), nil
}

func (mem) SyncTurn(ctx context.Context, user, assistant string) error {
	mu.Lock()
	ts := append(remembered(), turn{Session: plugin.SessionID(ctx), User: user, Assistant: assistant})
	b, err := json.Marshal(ts)
	if err == nil {
		err = os.MkdirAll("surfaces", 0o700)
	}
	if err == nil {
		err = os.WriteFile("` + surfacesMemory + `", b, 0o600)
	}
	mu.Unlock()
	if err != nil {
		return err
	}
	return record(ctx, "memory", "sync_turn", map[string]any{"user": user, "assistant": assistant})
}

func (mem) Shutdown(ctx context.Context, session string) error {
	return record(ctx, "memory", "shutdown", map[string]any{"session_id": session})
}

// hook is made by a function of its own: the interpreter's closures in a
// loop share the loop's variable.
func hook(event string) plugin.Hook {
	return func(c context.Context, p map[string]any) error { return record(c, "hook", event, p) }
}

type img struct{}

func (img) Name() string { return "` + SurfacesPlugin + `" }

func (img) Generate(ctx context.Context, prompt string, options map[string]any) (map[string]any, error) {
	if err := record(ctx, "image", "generate", map[string]any{"prompt": prompt, "options": options}); err != nil {
		return nil, err
	}
	return map[string]any{"image": "drawn:" + prompt, "pid": os.Getpid(), "session": plugin.SessionID(ctx)}, nil
}

func Register(ctx plugin.Context) error {
	for _, ev := range []string{"` + strings.Join(surfacesHooks, `", "`) + `"} {
		if err := ctx.RegisterHook(ev, hook(ev)); err != nil {
			return err
		}
	}
	if err := ctx.RegisterImageGenProvider(img{}); err != nil {
		return err
	}
	return ctx.RegisterMemoryProvider(mem{})
}
`

// surfacesModelSource is the model-provider plugin: the base URL and key
// stay the profile's (model.base_url and model.key_env set them), its
// BuildExtraBody records the call and marks the request.
var surfacesModelSource = `package canarysurfacesmodel

import (
	"context"
	"encoding/json"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mp struct{}

func (mp) Profile() plugin.ModelProfile { return plugin.ModelProfile{Name: "` + SurfacesModel + `"} }

func (mp) BuildExtraBody(ctx context.Context, session string) (map[string]any, error) {
	if err := os.MkdirAll("surfaces", 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile("` + surfacesModelLog + `", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := json.Marshal(map[string]any{"kind": "model", "event": "build_extra_body", "session": plugin.SessionID(ctx), "pid": os.Getpid(),
		"data": map[string]any{"session_id": session}})
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	return map[string]any{"` + surfacesExtra + `": map[string]any{"session": session, "pid": os.Getpid()}}, nil
}

func Register(ctx plugin.Context) error { return ctx.RegisterModelProvider(mp{}) }
`
