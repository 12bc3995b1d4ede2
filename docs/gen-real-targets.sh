#!/bin/sh
# docs/gen-real-targets.sh: regenerate the Hermes run in docs/real-targets.md.
#
# It needs Hermes installed by hand as docs/real-targets.md (Hermes, step 1)
# says, with `hermes` and `python3` first on PATH, so it is run by hand,
# never by CI:
#
#   PATH=/opt/hermes-bin:$PATH docs/gen-real-targets.sh [--diagnostic] [canary-run flags...]
#   PATH=/opt/hermes-bin:$PATH docs/gen-real-targets.sh [--diagnostic] --from DIR [flags]
#
# It builds canary-run from this checkout, runs `canary-run target check`
# on examples/targets/hermes/target.yaml, then certifies Hermes with the whole
# catalog (`--no-self-test`; the flags given are added), and writes what the
# run showed (the versions, both commands and how they ended, the verdict,
# the scenario table, who reached whom, the findings by invariant with what
# Hermes did, the skipped checks) between the `hermes-run` markers of
# docs/real-targets.md. The rest of the doc (the set-up, the one-api
# section) is not touched. `--from DIR` takes the certificate of a run
# already made (DIR holds its certificate.json and summary.md, as --out
# wrote them) instead of making one, and the flags after it are the ones
# that run was made with (the doc shows them); the target check is still
# run. The certificate is read with the python3 first on PATH (Hermes's,
# which the run needs anyway).
# --diagnostic certifies a copy of the file (made in a temporary folder)
# whose one change is each profile's key written literally into its
# config.yaml (`api_key: "{provider_key}"` for `"${TENANT_PROVIDER_KEY}"`),
# so the named profiles' turns reach their providers with their own key
# and the scenarios go past their first turn; it writes the
# `hermes-diagnostic-run` block instead.
# HERMES_CERT_OUT=DIR keeps the run's certificate (and, with --keep, its
# work tree) in DIR; by default it goes into a temporary folder, removed.
#
# What Hermes did, per invariant, is this script's text (explain, below);
# the counts are the run's. An invariant the run found that explain does
# not cover is written "(not explained yet)" and the script exits 1: say
# what Hermes did, then run it again.
#
# certify's TestRealTargetsMatchesTheCatalog fails when the doc's scenario
# table is not today's catalog: run this again after a scenario is added,
# removed or renamed.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
doc="$repo/docs/real-targets.md"
target=examples/targets/hermes/target.yaml
block=hermes-run
shown=$target
from=
diagnostic=
if [ "${1:-}" = --diagnostic ]; then
	diagnostic=1
	block=hermes-diagnostic-run
	shift
fi
if [ "${1:-}" = --from ]; then
	[ $# -ge 2 ] || { echo "usage: gen-real-targets.sh --from DIR [canary-run flags the run was made with]" >&2; exit 2; }
	from=$(cd "$2" && pwd)
	shift 2
fi

hermes_version=$(hermes --version 2>/dev/null | head -n 1) || true
case "$hermes_version" in
"Hermes Agent v"*) ;;
*)
	echo "gen-real-targets: no Hermes on PATH (hermes --version: '$hermes_version'): install it as docs/real-targets.md says and put its folder first on PATH" >&2
	exit 2
	;;
esac
python_version=$(python3 -c 'import platform; print(platform.python_version())')

work=$(mktemp -d "${TMPDIR:-/tmp}/gen-real-targets.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
(cd "$repo" && go build -o "$work/canary-run" ./cmd/canary-run)
if [ -n "$diagnostic" ]; then
	cp -R "$repo/examples/targets/hermes" "$work/hermes-diagnostic"
	target=$work/hermes-diagnostic/target.yaml
	shown='$COPY/target.yaml'
	sed -i 's|api_key: "\${{key_env}}"|api_key: "{provider_key}"|' "$target"
	grep -q 'api_key: "{provider_key}"' "$target" || {
		echo "gen-real-targets: the file's model.api_key is no longer \"\${{key_env}}\"; change --diagnostic's sed" >&2
		exit 2
	}
fi

check=0
(cd "$repo" && "$work/canary-run" target check "$target" >"$work/check.txt" 2>&1) || check=$?

out="$from"
if [ -z "$out" ]; then
	out="${HERMES_CERT_OUT:-$work/out}"
	status=0
	start=$(date +%s)
	(cd "$repo" && "$work/canary-run" --target "$target" --no-self-test --out "$out" "$@" \
		>"$work/console.txt" 2>"$work/progress.txt") || status=$?
	echo "gen-real-targets: canary-run exited $status in $(($(date +%s) - start)) s" >&2
fi
if [ ! -f "$out/certificate.json" ] || [ ! -f "$out/summary.md" ]; then
	echo "gen-real-targets: no certificate in $out; $doc is left as it was" >&2
	[ -f "$work/progress.txt" ] && tail -n 40 "$work/progress.txt" >&2
	exit 1
fi

flags=
for a in "$@"; do flags="$flags $a"; done

# explain: what Hermes did, per invariant, one "invariant<TAB>text" a line.
# The run gives the counts and where; this gives the why, from the run's
# findings and Hermes's source.
explain=$work/explain.tsv
cat >"$explain" <<'EOF'
request	tenants' provider requests carry another tenant's key. `model.api_key: "${TENANT_PROVIDER_KEY}"` is expanded from the pooled process's environment, which holds the `.env` the process last loaded: the launch profile's from the start (for a named profile's session Hermes binds its `HERMES_HOME`, not its `.env`), a named profile's once Hermes has loaded that one, and then the launch profile's own requests carry the named profile's key. So the model probes (`/api/v1/models`, `/api/tags`, `/v1/props`, `/props`, `/version`) and chat calls reach each tenant's own provider with another's key and fail with 401. Bodies carry the launch `.env` marker and variable (tool output of the shared environment); the launch profile's model lookups (`/api/show`) may name a named profile's model
env_snapshot	a named profile's terminal probe shows the launch profile's `.env` marker and variable (`CANARY_DEFAULT_…`): every tool shell inherits the pooled process's environment
file	each named profile's `state.db` (and WAL) and `logs/agent.log` / `errors.log` hold the launch profile's model (the session row takes the model `session.create` resolved outside the profile's home) and the launch `.env` marker (tool output)
rpc	`session.create{profile}` replies to a named profile carry the launch profile's model: tui_gateway builds the reply's `info` (`_resolve_model()`, `profile_name`) before it binds the profile's `HERMES_HOME`; stdio tool events carry the launch `.env` marker
text	the stdio backends' output for `alpha` and `beta` carries the launch profile's model (the `session.create` reply) and its `.env` marker and variable (tool output)
launch_bleed	every `session.create{profile}` of a named profile reports the launch profile's model and `profile_name: default` (the cause under `rpc`); the scenarios also fail on the profile name
shared_place	most are the launch tenant's own keys (provider key, `API_SERVER_KEY`, from its tool output) in the launch home's `state.db` and WAL, which the file declares a server file (`server_files`: the serve backend writes it whoever acts), where by the harness's rule any tenant's secret counts, the launch tenant's own included; the rest are the terminal tool's `$TMPDIR/hermes-snap-*.sh` (each shell's `declare -x` snapshot) holding provider keys outside every home
operator_secret	`HERMES_DASHBOARD_SESSION_TOKEN`, the serve backend's operator token, is in the pooled process's environment, so in the probe plugin's environment dump: it reached the launch tenant's provider request, its websocket frames and its `state.db`
plugin_boundary	the probe plugin runs inside the pooled server's own process, in the server's working folder, not its profile's home; a stdio backend launched on the launch profile served `alpha`'s session and ran `alpha`'s plugin, which read `default`'s and `beta`'s `.env`; so did `alpha`'s plugin in `hermes cron tick` firing `alpha`'s job (every home is readable from plugin code)
process_escape	tool shells' background processes (`sleep 600`, `( sleep 600 & )`) outlived their session's close, their profile's deletion and the server's stop, carrying the tenant's marks (and the launch key, in the shared environment); a deleted profile's `tui_gateway.slash_worker` outlived it; the probe plugin's `setsid`'d child outlived the server
unsandboxed_env	processes Hermes starts (the terminal tool's shells and what runs in them, `git`, `python3 -m tui_gateway.slash_worker`) run outside any sandbox, in the server's namespaces, carrying tenants' `.env` variables
write_scope	a write addressed to one profile changed another's files: `config.set` and `model.save_key` addressed to a named profile write the launch profile's `config.yaml` and `.env`; writes addressed to `default` added the named profiles' `auth.lock` and changed their `state.db` WAL and SHM (their own server-side files, which `server_files`, declared for the launch home only, does not cover)
authz	a connection drove another connection's live session (`prompt.submit`, `config.set`, `model.save_key`, `session.close` on its id all answered): Hermes binds a session to no connection, and every connection holds the serve backend's operator token; a live session of a deleted profile still served after the profile was made again
availability	under a neighbour's flood, other tenants' turn p99 rose far past 3x their baseline while the machine control barely slowed: one Python process serves every tenant's turns
resource_harm	a tenant's own file in a hostile form (a FIFO, a link to a device such as `/dev/zero`) harmed the pooled server, which reads it for every tenant: the read blocked one of its dispatch threads (tui_gateway runs each call in `asyncio.to_thread`; another tenant's `session.create` then got no reply within 10 s) or grew its memory without end (`agent/prompt_builder.py` reads `SOUL.md` whole before truncating it; a `.env` line from `/dev/zero` never ends). The file attacks stop at the first harm, named under "How each scenario ended"
snapshot_shortfall	tenants got no probe snapshot: their turns failed with the provider's 401 (the key under `request`), so their tools never ran. Liveness, not a leak
control	tenants' providers saw no request with their own key (the same 401 turns). Not a leak in itself; the scenarios cannot pass while a control fails
hermes-diagnostic-run/request	request bodies carry other tenants' canaries, keys included: the tool output of the hostile rows (a tenant's shell reads every other home's `.env`, `SOUL.md`, memories and `state.db`: nothing confines it) and of every turn's shell (the launch `.env` in the shared environment). The auth headers are each tenant's own here: the key is literal
hermes-diagnostic-run/file	each named profile's `state.db`, WAL and logs hold other tenants' canaries: the hostile rows' tool output (other homes' files, read by the tenant's shell) and the launch profile's model and `.env` marker (as in the run above)
hermes-diagnostic-run/control	mostly a named profile's env snapshot showing the launch `.env` marker, not its own (the shared environment); and the `hostile-tools` spawn rows (`nohup … &`, a double fork, many children) that did not run: Hermes's terminal tool refuses a foreground command that backgrounds with `&` ("Use terminal(background=true) for long-lived processes"). Not a leak; the scenarios cannot pass while a control fails
hermes-diagnostic-run/snapshot_shortfall	a tenant got fewer probe snapshots than the scenario expects (one turn's tool did not run, with the provider's key its own here). Liveness, not a leak
harness	checks the harness could not make: a scenario that ran out of its own time on this machine could not scan after its last phase (`not scanned: ... context deadline exceeded`). Not a leak; a longer `--timeout` gives it time
EOF

python3 - "$doc" "$out" "$work/check.txt" "$check" "$explain" "$hermes_version" "$python_version" "$flags" "$block" "$shown" <<'EOF'
import json, re, sys
from collections import Counter, defaultdict

doc_path, out, check_path, check_status, explain_path, hermes_version, python_version, flags, block, shown = sys.argv[1:]
begin = f"<!-- BEGIN {block}: written by docs/gen-real-targets.sh from a run; edit the script, not this block -->"
end = f"<!-- END {block} -->"

cert = json.load(open(f"{out}/certificate.json"))
summary = open(f"{out}/summary.md").read().splitlines()
explain = dict(l.rstrip("\n").split("\t", 1) for l in open(explain_path) if "\t" in l)
check = open(check_path).read().splitlines()

def section(title):
    """The lines of summary.md's '### title...' section, without its heading."""
    for i, l in enumerate(summary):
        if l.startswith("### " + title):
            j = i + 1
            while j < len(summary) and not summary[j].startswith("### "):
                j += 1
            return [x for x in summary[i + 1:j]]
    return []

def trimmed(lines):
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines

# The head of summary.md: the verdict paragraph and the scenario table.
headline = summary[0].removeprefix("## tenantcanary: ")
table_at = summary.index("| scenario | result | phases | requests | snapshots | findings | duration |")
paragraph = [l for l in summary[1:table_at] if l.strip()]
table = []
for l in summary[table_at:]:
    if not l.startswith("|"):
        break
    table.append(l)

# Findings by invariant, as the certificate has them (folded as summary.md's
# table counts them), with the scenarios that found them.
count, where = Counter(), defaultdict(Counter)
for s in cert["scenarios"]:
    for p in s.get("phases") or []:
        for f in p.get("findings") or []:
            count[f["invariant"]] += 1
            where[f["invariant"]][s["id"]] += 1
unexplained = [k for k in count if k not in explain and block + "/" + k not in explain]

tool = cert["tool"]
results = Counter(s["result"] for s in cert["scenarios"])
o = []
o.append(begin)
o.append("")
o.append(f"Run {cert['date'][:10]} by hand: {hermes_version} (Python {python_version}), "
         f"tenantcanary {tool['version']} (commit `{tool.get('commit', '')[:12]}`), "
         f"the whole catalog ({len(cert['scenarios'])} scenarios: "
         + ", ".join(f"{n} {r}" for r, n in sorted(results.items())) + f") in {cert['duration_ns'] / 60e9:.0f} min.")
o.append("")
o.append("```")
if block != "hermes-run":
    o.append("$ COPY=$(mktemp -d) && cp -R examples/targets/hermes/. $COPY && "
             "sed -i 's|api_key: \"${{key_env}}\"|api_key: \"{provider_key}\"|' $COPY/target.yaml")
o.append(f"$ PATH=/opt/hermes-bin:$PATH go run ./cmd/canary-run target check {shown}")
o.extend(l for l in check if l.startswith("target ") or l.startswith("FAIL") or l.startswith("warn"))
o.append(f"(exit {check_status})")
o.append(f"$ PATH=/opt/hermes-bin:$PATH go run ./cmd/canary-run --target {shown} \\")
o.append(f"    --no-self-test{flags} --out /tmp/{block.replace('-run', '')}-cert")
exit_code = re.search(r"\*\*Verdict: \S+\*\* \(exit (\d+)\)", "\n".join(summary))
o.append(headline)
o.append(f"(exit {exit_code.group(1) if exit_code else '?'})")
o.append("```")
o.append("")
o.extend(paragraph)
o.append("")
o.extend(table)
o.append("")
o.append("Who reached whom (summary.md's):")
o.append("")
o.extend(trimmed(section("Who reached whom")))
o.append("")
o.append("By invariant (the counts are the run's; what Hermes did is from its findings and Hermes's source):")
o.append("")
o.append("| invariant | findings | scenarios | what Hermes did |")
o.append("|---|---:|---|---|")
for inv, n in sorted(count.items(), key=lambda kv: (-kv[1], kv[0])):
    most = sorted(where[inv].items(), key=lambda kv: (-kv[1], kv[0]))
    scen = ", ".join(f"`{s}` {k}" for s, k in most[:3]) + (f", {len(most) - 3} more" if len(most) > 3 else "")
    o.append(f"| `{inv}` | {n} | {scen} | {explain.get(block + '/' + inv) or explain.get(inv, '(not explained yet)')} |")

def ended(err):
    """A phase's error in a few words: a failed turn's JSON event becomes
    its text or message."""
    err = " ".join(err.split())
    head, sep, frame = err.partition(" failed: {")
    if sep:
        try:
            payload = json.loads("{" + frame)["params"]["payload"]
            err = f"{head} failed: {payload.get('text') or payload.get('message')}"
        except (ValueError, KeyError, TypeError):
            pass
    return err if len(err) <= 200 else err[:200] + "..."

o.append("")
o.append("How each scenario ended (its phases that ran, and the error that ended it):")
o.append("")
o.append("| scenario | result | phases run | ended by |")
o.append("|---|---|---|---|")
for s in cert["scenarios"]:
    phases = s.get("phases") or []
    ran = [p for p in phases if not (p.get("error") or "").startswith("not run")]
    if s["result"] == "skipped":
        o.append(f"| {s['id']} | skipped | — | {s.get('reason', '')} |")
        continue
    stop = next((p for p in ran if p.get("error")), None)
    how = f"`{stop['name']}`: {ended(stop['error'])}" if stop else "every phase ran"
    if s.get("not_run"):
        how = "not run: " + ended(s["not_run"])
    o.append(f"| {s['id']} | {s['result']} | {len(ran)} of {len(phases)} | {how.replace('|', '/')} |")
lines = [l for l in trimmed(section("Skipped checks")) if l.startswith("- ")]
if lines:
    o.append("")
    o.append("Skipped checks (summary.md's; not passed: not made):")
    o.append("")
    o.extend(lines[:20])
    if len(lines) > 20:
        o.append(f"- ... and {len(lines) - 20} more: see summary.md")
o.append("")
o.append(end)

text = open(doc_path).read()
if begin not in text or end not in text:
    sys.exit(f"gen-real-targets: {doc_path} has no {begin!r} ... {end!r} block to replace")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc_path, "w").write(head + "\n".join(o) + tail)
print(f"gen-real-targets: wrote the {block} block of {doc_path}", file=sys.stderr)
if unexplained:
    print("gen-real-targets: not explained yet (add them to explain in the script): " + ", ".join(sorted(unexplained)), file=sys.stderr)
    sys.exit(1)
EOF
