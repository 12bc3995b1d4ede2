package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gopkg.in/yaml.v3"
)

// maxExtends is how deep a chain of target files extending one another
// may go.
const maxExtends = 8

// readTargetFile reads a target file with {target_dir} filled and its
// extends: resolved: a file may name another (a path relative to its own
// folder) whose fields it starts from. Its own mappings merge into the
// base's key by key, any other value replaces the base's, and a key set
// to null removes the base's. chain holds the files already being read,
// to refuse a cycle.
func readTargetFile(path string, chain []string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return resolveTargetFile(path, data, chain)
}

// resolveTargetFile is readTargetFile on a file's data already read.
func resolveTargetFile(path string, data []byte, chain []string) ([]byte, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if slices.Contains(chain, abs) {
		return nil, fmt.Errorf("extends: %s extends itself through %v", abs, chain)
	}
	if len(chain) >= maxExtends {
		return nil, fmt.Errorf("extends: more than %d files deep (%v)", maxExtends, chain)
	}
	if data, err = withTargetDir(data, filepath.Dir(abs)); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return data, nil // empty or not a mapping: the decoder says what is wrong
	}
	top := doc.Content[0]
	var base string
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "extends" {
			v := top.Content[i+1]
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return nil, fmt.Errorf("extends (line %d): want the path of a target file", v.Line)
			}
			base = v.Value
			top.Content = slices.Delete(top.Content, i, i+2)
			break
		}
	}
	if base == "" {
		return data, nil
	}
	if !filepath.IsAbs(base) {
		base = filepath.Join(filepath.Dir(abs), base)
	}
	baseData, err := readTargetFile(base, append(chain, abs))
	if err != nil {
		return nil, fmt.Errorf("extends %s: %w", base, err)
	}
	var baseDoc yaml.Node
	if err := yaml.Unmarshal(baseData, &baseDoc); err != nil {
		return nil, fmt.Errorf("extends %s: %w", base, err)
	}
	if len(baseDoc.Content) == 0 || baseDoc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("extends %s: not a mapping of target fields", base)
	}
	mergeYAML(baseDoc.Content[0], top)
	return yaml.Marshal(&baseDoc)
}

// mergeYAML merges mapping over into mapping base: a key whose values are
// both mappings merges, a null value removes the key, any other value
// replaces base's.
func mergeYAML(base, over *yaml.Node) {
	for i := 0; i+1 < len(over.Content); i += 2 {
		k, v := over.Content[i], over.Content[i+1]
		at := -1
		for j := 0; j+1 < len(base.Content); j += 2 {
			if base.Content[j].Value == k.Value {
				at = j
				break
			}
		}
		null := v.Kind == yaml.ScalarNode && v.Tag == "!!null"
		switch {
		case at < 0 && null:
		case at < 0:
			base.Content = append(base.Content, k, v)
		case null:
			base.Content = slices.Delete(base.Content, at, at+2)
		case v.Kind == yaml.MappingNode && base.Content[at+1].Kind == yaml.MappingNode:
			mergeYAML(base.Content[at+1], v)
		default:
			base.Content[at+1] = v
		}
	}
}
