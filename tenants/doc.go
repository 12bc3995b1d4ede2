// Package tenants builds the tenants of a canary run: each with a name, a
// home, a working directory, a random tag, its own fake provider and the
// canaries derived from the tag, and writes their homes in the layout the
// target reads.
//
//	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}})
//	if err != nil { ... }
//	defer set.Close()
//	if err := set.WriteHomes(tenants.HomeExtras{}); err != nil { ... }
//	env, err := set.Env(nil) // hermetic environment for the target's processes
//
// Every canary has the form <kind>-<tenant>-<tag> with a 10-hex random tag
// (alphabet [a-z0-9-], unchanged by JSON, URL and HTML escaping), except the
// env_name canary, which is the NAME of a variable only that tenant's .env
// holds: CANARY_<TENANT>_<TAG>.
package tenants
