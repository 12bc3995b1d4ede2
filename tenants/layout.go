package tenants

// Layout names the places and variables of a target's homes, so a target
// other than agentd can be certified with the same tenants: a target file
// maps each of them.
type Layout struct {
	HomeVar         string   `yaml:"home_var"`           // variable naming the launch profile's home (AGENTD_HOME)
	LaunchDir       string   `yaml:"launch_dir"`         // the launch home's folder under HOME (.agentd)
	ProfilesDir     string   `yaml:"profiles_dir"`       // folder of named profiles under the launch home (profiles)
	KeyEnv          string   `yaml:"key_env"`            // .env variable holding the provider key, same NAME in every profile
	APIServerKeyEnv string   `yaml:"api_server_key_env"` // .env variable holding the gateway key
	MarkerEnv       string   `yaml:"marker_env"`         // .env variable holding the tenant's env marker
	VarPrefixes     []string `yaml:"var_prefixes"`       // the target's own variable prefixes, stripped from a child's environment
}

// AgentdLayout is the layout of the embedded target, agentd.
func AgentdLayout() Layout {
	return Layout{
		HomeVar:         "AGENTD_HOME",
		LaunchDir:       ".agentd",
		ProfilesDir:     "profiles",
		KeyEnv:          "TENANT_PROVIDER_KEY",
		APIServerKeyEnv: "API_SERVER_KEY",
		MarkerEnv:       "TENANT_MARKER",
		VarPrefixes:     []string{"AGENTD_"},
	}
}

// WithDefaults fills every empty field from AgentdLayout.
func (l Layout) WithDefaults() Layout {
	d := AgentdLayout()
	fill := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	fill(&l.HomeVar, d.HomeVar)
	fill(&l.LaunchDir, d.LaunchDir)
	fill(&l.ProfilesDir, d.ProfilesDir)
	fill(&l.KeyEnv, d.KeyEnv)
	fill(&l.APIServerKeyEnv, d.APIServerKeyEnv)
	fill(&l.MarkerEnv, d.MarkerEnv)
	if l.VarPrefixes == nil {
		l.VarPrefixes = d.VarPrefixes
	}
	return l
}
