// Command dialectprobe is the dialect test server's probe plugin
// (docs/probe-plugin.md) in the server's own plugin format: an executable
// speaking JSON lines on stdin and stdout (dialectserver/plugins.go), one
// process per tenant. Its tools:
//
//	dialect_probe{tag, read}  where it runs (pid, ppid, host, cwd), its
//	                          environment, what reading each path got, the
//	                          session state it found under canary-tag
//	                          (storing tag), and a nested exec as its session
//	dialect_hostile{op, ...}  harness/attack's plugin rows: read, append,
//	                          spawn, ping (hog is declared unsupported), run
//	                          by harness/attack's hostile plugin itself
//
// The dialect server builds it beside plugin.json and the hostile plugin's
// folder (harness/dialecttest).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// hostID names this host process: unique where pids are not.
var hostID = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

var (
	in   = bufio.NewScanner(os.Stdin)
	asks int
)

func send(v any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

// ask makes a nested call into the server, as the calling session, and
// returns its result.
func ask(op string, args map[string]any) (any, error) {
	asks++
	send(map[string]any{"ask": asks, "op": op, "args": args})
	if !in.Scan() {
		return nil, fmt.Errorf("the server went away during ask %s", op)
	}
	var a struct {
		Answer int    `json:"answer"`
		Result any    `json:"result"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(in.Bytes(), &a); err != nil {
		return nil, err
	}
	if a.Error != "" {
		return nil, fmt.Errorf("ask %s: %s", op, a.Error)
	}
	return a.Result, nil
}

func probe(args map[string]any) (string, error) {
	env := os.Environ()
	sort.Strings(env)
	wd, _ := os.Getwd()
	tag, _ := args["tag"].(string)
	prev, err := ask("state.get", map[string]any{"key": "canary-tag"})
	if err != nil {
		return "", err
	}
	if _, err := ask("state.set", map[string]any{"key": "canary-tag", "value": tag}); err != nil {
		return "", err
	}
	nested, err := ask("exec", map[string]any{"cmd": "echo NESTED-CWD=$(pwd)"})
	if err != nil {
		return "", err
	}
	reads := map[string]string{}
	paths, _ := args["read"].([]any)
	for _, p := range paths {
		path, _ := p.(string)
		if _, err := os.ReadFile(path); err != nil {
			reads[path] = "error: " + err.Error()
		} else {
			reads[path] = "ok"
		}
	}
	prevS, _ := prev.(string)
	nestedS, _ := nested.(string)
	b, err := json.Marshal(map[string]any{"pid": os.Getpid(), "ppid": os.Getppid(), "host": hostID, "cwd": wd, "env": env,
		"prev": prevS, "reads": reads, "nested": nestedS})
	return string(b), err
}

// hostileTool is harness/attack's hostile plugin, interpreted here as a
// plugin host interprets it, so dialect_hostile runs the plugin rows' ops
// with the very code of the Go plugin format's rows. Its folder is beside
// this executable (dialecttest.Build writes it there); it is loaded at the
// first dialect_hostile call.
var (
	hostileOnce sync.Once
	hostileTool plugin.Tool
	hostileErr  error
)

func hostile(args map[string]any) (string, error) {
	if op, _ := args["op"].(string); op == "hog" {
		return "hog is unsupported by this probe plugin\n" + attack.RowDone, nil
	}
	hostileOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			hostileErr = fmt.Errorf("dialect_hostile: %w", err)
			return
		}
		hostileTool, hostileErr = attack.LoadPlugin(filepath.Dir(exe))
	})
	if hostileErr != nil {
		return "", hostileErr
	}
	return hostileTool.ContextHandler(context.Background(), args)
}

// tools are the plugin's tools by name.
var tools = map[string]func(args map[string]any) (string, error){
	"dialect_probe":   probe,
	"dialect_hostile": hostile,
}

func main() {
	in.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for in.Scan() {
		var call struct {
			ID   int            `json:"id"`
			Tool string         `json:"tool"`
			Args map[string]any `json:"args"`
		}
		if err := json.Unmarshal(in.Bytes(), &call); err != nil {
			fmt.Fprintln(os.Stderr, "dialectprobe: bad line:", err)
			continue
		}
		run, ok := tools[call.Tool]
		if !ok {
			send(map[string]any{"id": call.ID, "error": "unknown tool " + call.Tool})
			continue
		}
		res, err := run(call.Args)
		if err != nil {
			send(map[string]any{"id": call.ID, "error": err.Error()})
			continue
		}
		send(map[string]any{"id": call.ID, "result": res})
	}
}
