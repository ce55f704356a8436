package worker

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuietRiver_lowersTheProducerCountsToDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out bytes.Buffer
		log := slog.New(quietRiver{slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level})}).With("component", "river")
		log.Info("default: Producer job counts", "num_completed_jobs", 3)
		log.Info("River client started")
		log.Warn("something River warns of")
		lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
		if level == slog.LevelInfo {
			require.Len(t, lines, 2, "%s", out.String())
			require.NotContains(t, out.String(), "Producer job counts")
			require.Contains(t, string(lines[0]), "level=INFO msg=\"River client started\" component=river")
			continue
		}
		require.Len(t, lines, 3, "%s", out.String())
		require.Contains(t, string(lines[0]), "level=DEBUG msg=\"default: Producer job counts\" component=river num_completed_jobs=3")
	}
}
