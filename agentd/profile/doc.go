// Package profile knows where agentd's homes live and what is in them: the
// launch home and its named profiles, each profile's config.yaml deep-merged
// under the managed (operator) scope, and its .env file.
//
// Nothing here reads or writes the process environment: a profile's
// variables are values handed to whatever runs for that profile.
//
//	homes := profile.Homes{Launch: "/home/u/.agentd", Managed: "/etc/agentd"}
//	p, err := homes.Get("work")          // profiles/work, or ErrUnknownProfile
//	cfg, err := p.LoadConfig()           // managed scope merged over the profile's own
//	env, err := p.LoadEnv()              // .env as an ordered list of variables
//	key, _ := env.Lookup(cfg.Model.KeyEnv)
package profile
