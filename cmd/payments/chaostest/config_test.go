package chaostest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Not parallel: t.Setenv changes the process's environment.
func TestConfigFromEnv_readsEverySettingAndRefusesNonsense(t *testing.T) {
	t.Setenv("CHAOS_DURATION", "10m")
	t.Setenv("CHAOS_CLIENTS", "4")
	t.Setenv("CHAOS_SEED", "42")
	t.Setenv("CHAOS_FAULT_RATE", "0.5")
	t.Setenv("CHAOS_CRASH_INTERVAL", "0")
	t.Setenv("CHAOS_KILL_WORKER", "true")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, cfg.Duration)
	require.Equal(t, 4, cfg.Clients)
	require.Equal(t, uint64(42), cfg.Seed)
	require.Equal(t, 0.5, cfg.FaultRate)
	require.Zero(t, cfg.CrashInterval, "0 turns crashes off")
	require.True(t, cfg.KillWorker)

	for name, value := range map[string]string{
		"CHAOS_DURATION": "soon", "CHAOS_CLIENTS": "0", "CHAOS_SEED": "-1", "CHAOS_CRASH_INTERVAL": "1ms",
		"CHAOS_WEBHOOK_DUPLICATES": "2", "CHAOS_KILL_WORKER": "maybe",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			_, err := ConfigFromEnv()
			require.Error(t, err, "%s=%s", name, value)
		})
	}
}
