package scenarios

// Default is the certification catalog.
func Default() *Catalog {
	c, err := NewCatalog(
		stdioSeparate(),
		pooledServe(),
		concurrentTurns(),
		settingsWrites(),
		profileLifecycle(),
		restartResume(),
		gateway(),
		shellReuse(),
		pluginHosts(),
		pluginSurfaces(),
		tenantAuthz(),
		profileRecreate(),
		hostileTools(),
		hostilePlugin(),
		hostileChains(),
		hostileRestarts(),
		surfaceScenario(),
		credentialRevocation(),
		replicasScenario(),
		entryPoints(),
		collidingInputs(),
		cancellations(),
		noisyNeighbour(),
		fairShare(),
		gatewayTenants(),
		gatewayFailover(),
		gatewayRoutes(),
		gatewayOffboarding(),
		gatewayFetch(),
		gatewayCollide(),
		gatewayReplicas(),
	)
	if err != nil {
		// The catalog is data compiled into the binary; TestCatalogIsValid
		// keeps this unreachable.
		panic(err)
	}
	return c
}

func perTenant(n int) func(int) int { return func(int) int { return n } }
