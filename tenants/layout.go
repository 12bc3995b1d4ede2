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
	// Files names the files the target reads or writes in a home, relative
	// to it: the multi-step attacks replace each with a symlink.
	Files FileNames `yaml:"home_files"`

	// StateRoot, when set, is where the target keeps its tenants' state
	// apart from their homes ({root}/... : inside the sandbox); each
	// tenant's state folder is StateDir under it (default {profile}), and
	// is scanned as that tenant's own place (state.go).
	StateRoot string `yaml:"state_root"`
	StateDir  string `yaml:"state_dir"` // e.g. agents/{profile}; {name} or {profile}
	// StateDB is the state database's path relative to the tenant's state
	// folder (or its home, without a state root); default Files.State.
	StateDB string `yaml:"state_db"`
}

// FileNames are the files (and folders) a target reads or writes in a
// tenant's home, each relative to the home; an empty one is one the target
// does not have (its attacks are skipped).
type FileNames struct {
	Config    string `yaml:"config"`     // the profile's settings (config.yaml)
	Env       string `yaml:"env"`        // its secrets (.env)
	Soul      string `yaml:"soul"`       // its system prompt (SOUL.md)
	Memory    string `yaml:"memory"`     // its memory (memories/MEMORY.md)
	Jobs      string `yaml:"jobs"`       // its cron jobs (cron/jobs.json)
	JobOutput string `yaml:"job_output"` // the folder of its jobs' output (cron/output)
	Log       string `yaml:"log"`        // its log (logs/agent.log)
	LogDir    string `yaml:"log_dir"`    // the folder of its logs (logs)
	State     string `yaml:"state"`      // its session store (state.db)
	StateWAL  string `yaml:"state_wal"`  // the store's write-ahead log (state.db-wal)
	Plugins   string `yaml:"plugins"`    // the folder of its plugins (plugins)
	Cache     string `yaml:"cache"`      // the folder of what it caches for the profile (cache)
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
		Files:           AgentdFileNames(),
	}
}

// AgentdFileNames are agentd's home files (DESIGN.md's home layout).
func AgentdFileNames() FileNames {
	return FileNames{Config: "config.yaml", Env: ".env", Soul: "SOUL.md", Memory: "memories/MEMORY.md",
		Jobs: "cron/jobs.json", JobOutput: "cron/output", Log: "logs/agent.log", LogDir: "logs",
		State: "state.db", StateWAL: "state.db-wal", Plugins: "plugins", Cache: "cache"}
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
	if l.Files == (FileNames{}) {
		l.Files = d.Files
	}
	return l
}
