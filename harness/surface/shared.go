package surface

import (
	"strings"

	"github.com/tenantcanary/tenantcanary/harness/attack"
)

// sharedDirs are the folders a sandboxed shell may see and write that
// another tenant's sandbox may see too: the temp folders, and the folders
// above its home and its working folder (a parent of every tenant's).
var sharedDirs = []string{"/tmp", "/var/tmp", "/dev/shm", `"${TMPDIR:-/tmp}"`, `"$(dirname "$PWD")"`,
	`"$(dirname "$HOME")"`, `"$(dirname "$(dirname "$HOME")")"`}

// sharedPrefix names the files the shared-place rows plant.
const sharedPrefix = ".surface-shared-"

// SharedRows are the attacks on what tenants' sandboxes share: plant puts
// the attacker's write canary into every such folder it can write (and
// says where), look brings back what any tenant planted there, clean
// removes the attacker's own. Run plant by every tenant, then look by
// every tenant: a canary of another's in a look's result is a leak, in
// both orders.
func SharedRows() (plant, look, clean attack.Row) { return sharedRowsIn(sharedDirs) }

// sharedRowsIn are SharedRows over the folders dirs (shell words).
func sharedRowsIn(folders []string) (plant, look, clean attack.Row) {
	dirs := strings.Join(folders, " ")
	plant = attack.Row{ID: "shared-plant", Class: attack.Write,
		Tries:   "write its canary into every folder outside its home its sandbox can write: the temp folders, the folders above its home and workdir",
		Refusal: "each sandbox has its own temp folders and sees no folder another tenant's sandbox writes",
		Call: func(c attack.Canaries) attack.Call {
			return attack.TerminalCall("for d in " + dirs + `; do [ -d "$d" ] && [ -w "$d" ] && printf '%s\n' '` + c.Write +
				`' > "$d/` + sharedPrefix + c.Write + `" 2>/dev/null && echo "planted in $d"; done; echo '` + attack.RowDone + "'")
		}}
	look = attack.Row{ID: "shared-look", Class: attack.Read,
		Tries:   "read every file another tenant's sandbox may have planted in the folders outside its home it can see",
		Refusal: "nothing another tenant planted is visible: no foreign canary comes back",
		Call: func(attack.Canaries) attack.Call {
			return attack.ReadingCall("for d in " + dirs + `; do cat "$d"/` + sharedPrefix + `*; done`)
		}}
	clean = attack.Row{ID: "shared-clean", Class: attack.Write,
		Tries:   "remove what its plant left",
		Refusal: "(housekeeping: nothing is refused)",
		Call: func(c attack.Canaries) attack.Call {
			return attack.TerminalCall("for d in " + dirs + `; do rm -f "$d/` + sharedPrefix + c.Write + `"; done 2>/dev/null; echo '` + attack.RowDone + "'")
		}}
	return plant, look, clean
}
