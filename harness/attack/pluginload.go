package attack

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// WritePlugin writes the hostile plugin's folder, PluginName with its
// plugin.yaml (PluginManifest) and plugin.go (PluginSource), into dir.
func WritePlugin(dir string) error {
	pdir := filepath.Join(dir, PluginName)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return fmt.Errorf("write the hostile plugin: %w", err)
	}
	for name, text := range map[string]string{"plugin.yaml": PluginManifest, "plugin.go": PluginSource} {
		if err := os.WriteFile(filepath.Join(pdir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("write the hostile plugin: %w", err)
		}
	}
	return nil
}

// LoadPlugin interprets the hostile plugin WritePlugin wrote into dir, in
// this process as a plugin host does: unrestricted (the real environment
// and os/exec). It returns the plugin's one tool (PluginTool). A host of
// another plugin format runs the plugin rows' ops through it, so they are
// the same code in every format.
func LoadPlugin(dir string) (plugin.Tool, error) {
	pctx := &toolContext{}
	if err := pluginload.Load(filepath.Join(dir, PluginName), pctx, pluginload.Options{Unrestricted: true}); err != nil {
		return plugin.Tool{}, fmt.Errorf("load the hostile plugin: %w", err)
	}
	if pctx.tool.Name != PluginTool || pctx.tool.ContextHandler == nil {
		return plugin.Tool{}, fmt.Errorf("load the hostile plugin: it registered no %s tool with a context handler", PluginTool)
	}
	return pctx.tool, nil
}

// toolContext is the part of a plugin context the hostile plugin uses: its
// name, and the tool it registers.
type toolContext struct {
	plugin.Context
	tool plugin.Tool
}

func (c *toolContext) Name() string { return PluginName }

func (c *toolContext) RegisterTool(t plugin.Tool) error { c.tool = t; return nil }
