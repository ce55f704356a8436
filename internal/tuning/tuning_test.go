package tuning_test

import (
	"os"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/tuning"
)

func TestApply_setsTheGCPercentUnlessGOGCIsSet(t *testing.T) {
	previous := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(previous) })

	t.Setenv("GOGC", "") // restored after the test
	require.NoError(t, os.Unsetenv("GOGC"))
	require.Equal(t, strconv.Itoa(tuning.GCPercent), tuning.Apply())
	require.Equal(t, tuning.GCPercent, debug.SetGCPercent(100), "set")

	t.Setenv("GOGC", "150")
	require.Equal(t, "150", tuning.Apply())
	require.Equal(t, 100, debug.SetGCPercent(100), "left to the environment")
}
