package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCRC16CCITTFalseCheckValue(t *testing.T) {
	t.Parallel()
	require.Equal(t, uint16(0x29B1), crc16CCITT([]byte("123456789"))) // the catalogued check value
}
