package harness

// AgentdRoutes are agentd's HTTP routes that gateway-routes probes: its
// gateway's (`agentd gateway`) health page (public), the launch profile's
// chat route and every other profile's, /p/{profile_id}/v1/chat/completions,
// each behind that profile's API_SERVER_KEY; and its serve backend's
// health page (public) and websocket endpoint (/api/ws, which refuses a
// caller without a token). An agent target's tenants carry the ids the
// harness has for them: {profile_id} (the profile's name,
// tenants.Tenant.Profile) and {tenant_id} (the tenant's name).
func AgentdRoutes() []Route {
	const probe = `{"model": "route-probe", "messages": [{"role": "user", "content": "route probe"}]}`
	key := AuthForms{{Name: FormKey}}
	rs := []Route{
		{Name: "health", Method: "GET", Path: "/health", Read: true, Public: true, Forms: key, Auth: FormKey, Success: `"status":\s*"ok"`},
		{Name: "chat on the launch route", Method: "POST", Path: "/v1/chat/completions", Body: probe, Forms: key, Auth: FormKey, Success: `"choices"`},
		{Name: "chat on a profile's route", Method: "POST", Path: "/p/{profile_id}/v1/chat/completions", Body: probe, Forms: key, Auth: FormKey, Success: `"choices"`},
		{Name: "serve health", Backend: RouteBackendServe, Method: "GET", Path: "/api/health", Read: true, Public: true, Forms: key, Auth: FormKey, Success: `"status":\s*"ok"`},
		{Name: "websocket endpoint", Backend: RouteBackendServe, Method: "GET", Path: "/api/ws", Forms: key, Auth: FormKey},
	}
	return rs
}
