package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// notCode are names the documents cite in backticks that no file of the
// repository declares, each with its reason.
var notCode = map[string]string{
	"AnonHugePages":                 "a field of Linux's /proc/meminfo",
	"terminationGracePeriodSeconds": "a Kubernetes pod setting, named for teams that deploy there",
}

// quoted is a span in backticks shaped like Go code: dotted identifiers, an
// optional () and an optional /subtest.
var quoted = regexp.MustCompile("`((?:[A-Za-z_][A-Za-z0-9_]*\\.)*[A-Za-z_][A-Za-z0-9_]*)(?:\\(\\))?(?:/[^`\\s]+)?`")

// codeLike tells a name in the shape only code gives: camelCase or
// MixedCase, or a test's name; snake_case, ALL_CAPS and plain words are
// JSON fields, settings and prose, checked elsewhere (the contract tests).
var codeLike = regexp.MustCompile(`^(Test|Benchmark|Example|Fuzz)[A-Z_]|[a-z][A-Z]|^[A-Z][a-z0-9]+[A-Z]`)

// Every Go-shaped name the documents cite exists in the repository's
// files (Go, SQL, YAML, scripts): docs/architecture.md cited a function
// createFlowCalling that did not exist.
func TestDocuments_citeOnlyWhatExists(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	declared := map[string]bool{}
	var documents []string
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if filepath.Dir(path) == filepath.Join(root, "internal", "doccheck") {
			return nil // this check's own examples of made-up names
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md":
			documents = append(documents, path)
		case ".go", ".sql", ".yaml", ".yml", ".sh", ".json", ".http", ".tmpl", ".html", ".js", ".css", ".conf", ".cfg":
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, w := range word.FindAllString(string(src), -1) {
				declared[w] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, documents)

	var missing []string
	for _, doc := range documents {
		src, err := os.ReadFile(doc)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, doc)
		for _, m := range quoted.FindAllStringSubmatch(string(src), -1) {
			parts := strings.Split(m[1], ".")
			name := parts[len(parts)-1]
			if !codeLike.MatchString(name) || declared[name] || notCode[name] != "" {
				continue
			}
			missing = append(missing, rel+": `"+m[1]+"`")
		}
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	require.Empty(t, missing, "names the documents cite that no file of the repository has")
}

// The check finds what it is for: a name no file has.
func TestDocuments_theCheckFindsAMadeUpName(t *testing.T) {
	t.Parallel()
	m := quoted.FindStringSubmatch("see `payments.createFlowCallingNobody()`")
	require.NotNil(t, m)
	require.Equal(t, "payments.createFlowCallingNobody", m[1])
	require.True(t, codeLike.MatchString("createFlowCallingNobody"))
	require.True(t, codeLike.MatchString("TestProve_customers"))
	require.False(t, codeLike.MatchString("idempotency_key_in_use"))
	require.False(t, codeLike.MatchString("DATABASE_URL"))
}

func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}
