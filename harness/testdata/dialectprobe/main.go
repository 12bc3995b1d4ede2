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
//	                          spawn, ping (hog is declared unsupported)
//
// The dialect server builds it beside plugin.json (harness/dialecttest).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/attack"
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

var canaryRE = regexp.MustCompile(attack.CanaryPattern)

func expand(p string) string {
	p = strings.ReplaceAll(p, "$PPID", strconv.Itoa(os.Getppid()))
	return os.ExpandEnv(p)
}

func globs(args map[string]any) []string {
	var out []string
	list, _ := args["globs"].([]any)
	for _, g := range list {
		s, _ := g.(string)
		m, _ := filepath.Glob(expand(s))
		out = append(out, m...)
	}
	return out
}

func hostile(args map[string]any) string {
	switch op, _ := args["op"].(string); op {
	case "read":
		found := map[string]bool{}
		for _, f := range globs(args) {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, m := range canaryRE.FindAllString(string(b), -1) {
				found[m] = true
			}
		}
		var out []string
		for k := range found {
			out = append(out, k)
		}
		sort.Strings(out)
		return strings.Join(out, "\n") + "\n" + attack.RowDone
	case "append":
		line, _ := args["line"].(string)
		own, _ := os.Stat(os.Getenv("HOME"))
		var wrote []string
		for _, f := range globs(args) {
			dir, err := os.Stat(filepath.Dir(f))
			if err != nil || (own != nil && os.SameFile(dir, own)) {
				continue
			}
			fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				continue
			}
			if _, err := fh.WriteString(line + "\n"); err == nil {
				wrote = append(wrote, f)
			}
			fh.Close()
		}
		return "wrote " + strings.Join(wrote, " ") + "\n" + attack.RowDone
	case "spawn":
		mark, _ := args["mark"].(string)
		var errs []string
		for _, argv := range [][]string{
			{"setsid", "-f", "sh", "-c", "sleep 600; : " + mark},
			{"sh", "-c", "( sleep 600; : " + mark + " ) </dev/null >/dev/null 2>&1 &"},
		} {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "HOSTILE_MARK="+mark)
			if err := cmd.Run(); err != nil {
				errs = append(errs, err.Error())
			}
		}
		return "spawned " + strings.Join(errs, "; ") + "\n" + attack.RowDone
	case "hog":
		return "hog is unsupported by this probe plugin\n" + attack.RowDone
	}
	return "pong " + strconv.Itoa(os.Getpid()) + "\n" + attack.RowDone
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
		switch call.Tool {
		case "dialect_probe":
			res, err := probe(call.Args)
			if err != nil {
				send(map[string]any{"id": call.ID, "error": err.Error()})
				continue
			}
			send(map[string]any{"id": call.ID, "result": res})
		case "dialect_hostile":
			send(map[string]any{"id": call.ID, "result": hostile(call.Args)})
		default:
			send(map[string]any{"id": call.ID, "error": "unknown tool " + call.Tool})
		}
	}
}
