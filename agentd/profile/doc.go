// Package profile knows where agentd's homes live and what is in them: the
// launch home and its named profiles, each profile's config.yaml deep-merged
// under the managed (operator) scope, and its .env file.
//
// Nothing here reads or writes the process environment: a profile's
// variables are values handed to whatever runs for that profile.
//
// Every file of a home is opened through Profile.FS (package homefs): a
// tenant's terminal can write its own home, so a file there may have been
// replaced by a symlink to another home; it is refused, never followed.
// Profile.File is a path for messages and for programs, never for opening.
//
//	homes := profile.Homes{Launch: "/home/u/.agentd", Managed: "/etc/agentd"}
//	p, err := homes.Get("work")          // profiles/work, or ErrUnknownProfile
//	cfg, err := p.LoadConfig()           // managed scope merged over the profile's own
//	env, err := p.LoadEnv()              // .env as an ordered list of variables
//	key, _ := env.Lookup(cfg.Model.KeyEnv)
package profile
