package ids

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNew_isThePrefixAnd24HexCharactersSortedByTime(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^pay_[0-9a-f]{24}$`)
	start := time.UnixMilli(1_763_800_000_000)
	prev := ""
	for i := range 1000 {
		id := newAt("pay", start.Add(time.Duration(i)*time.Millisecond))
		require.Regexp(t, shape, id)
		require.Greater(t, id, prev, "an id of a later millisecond sorts after the earlier ones")
		prev = id
	}
	// The random half differs between ids of the same millisecond.
	seen := map[string]bool{}
	for range 1000 {
		id := newAt("re", start)
		require.False(t, seen[id], "an id repeated within a millisecond: %s", id)
		seen[id] = true
		require.True(t, strings.HasPrefix(id, "re_019aaaac2600"), "the time part is the millisecond: %s", id)
	}
}

func TestNewUUID_isVersion7AndIncreases(t *testing.T) {
	t.Parallel()
	prev := NewUUID()
	require.EqualValues(t, 7, prev.Version())
	for range 10000 {
		id := NewUUID()
		require.Greater(t, id.String(), prev.String(), "ids of one process increase")
		prev = id
	}
}
