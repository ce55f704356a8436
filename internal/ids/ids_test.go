package ids

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTimeOrdered_isThePrefixTheMillisecondsAndRandomHex(t *testing.T) {
	at := time.UnixMilli(0x0123456789ab)
	id := timeOrdered("evt_", at)
	require.Len(t, id, len("evt_")+24)
	require.True(t, strings.HasPrefix(id, "evt_0123456789ab"), id)
	_, err := hex.DecodeString(id[len("evt_"):])
	require.NoError(t, err)
	require.NotEqual(t, id, timeOrdered("evt_", at), "the random part differs within a millisecond")
}

func TestTimeOrdered_laterMillisecondsSortAfter(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	prev := timeOrdered("evt_", at)
	for i := 1; i <= 1000; i++ {
		id := timeOrdered("evt_", at.Add(time.Duration(i)*time.Millisecond))
		require.Less(t, prev, id)
		prev = id
	}
	// A millisecond count that needs all 48 bits still sorts after a small one.
	require.Less(t, timeOrdered("evt_", time.UnixMilli(1)), timeOrdered("evt_", time.UnixMilli(1<<47)))
}

func TestTimeOrdered_now(t *testing.T) {
	before := time.Now().UnixMilli()
	id := TimeOrdered("evt_")
	after := time.Now().UnixMilli()
	b, err := hex.DecodeString(id[len("evt_") : len("evt_")+12])
	require.NoError(t, err)
	var ms int64
	for _, c := range b {
		ms = ms<<8 | int64(c)
	}
	require.GreaterOrEqual(t, ms, before)
	require.LessOrEqual(t, ms, after)
}
