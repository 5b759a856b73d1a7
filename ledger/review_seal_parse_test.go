package ledger_test

// Hostile review (branch rv-seal, area seal). REGRESSION GUARD (passes):
// seal files VerifySeal must refuse (ErrBadSeal), even when their digest
// and account count were recomputed to match their lines: an account listed
// twice with different heads, ids out of order, a header with an extra
// field, a line beyond the reader's limit, a trailer that is not the last
// line. No finding: the reader held on each.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
)

// resealed recomputes the trailer of body lines (header and accounts).
func resealed(lines []string) string {
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	return strings.Join(lines, "\n") + "\n" + fmt.Sprintf(`{"accounts":%d,"digest":"%s"}`, len(lines)-1, hex.EncodeToString(h.Sum(nil))) + "\n"
}

func TestReviewSealRefusesResealedOddFiles_R22(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	f.merchant(t, ctx, "a", "100.00")
	seal := takeSeal(t, ctx, f)
	lines := strings.Split(strings.TrimSuffix(string(seal), "\n"), "\n")
	require.Len(t, lines, 4)
	hdr, acc1, acc2, trailer := lines[0], lines[1], lines[2], lines[3]
	_, _, err := ledger.VerifySeal(ctx, f.pool, strings.NewReader(resealed([]string{hdr, acc1, acc2})))
	require.NoError(t, err, "the resealed original is a seal")

	for name, body := range map[string]string{
		"account twice":       resealed([]string{hdr, acc1, acc2, acc2}),
		"twice, other head":   resealed([]string{hdr, acc1, acc2, strings.Replace(acc2, `"seq":`, `"seq":1`, 1)}),
		"ids out of order":    resealed([]string{hdr, acc2, acc1}),
		"header extra field":  resealed([]string{strings.Replace(hdr, `{`, `{"x":1,`, 1), acc1, acc2}),
		"line beyond limit":   resealed([]string{hdr, acc1, strings.Replace(acc2, `"code":"`, `"code":"`+strings.Repeat("x", 70<<10), 1)}),
		"trailer not last":    resealed([]string{hdr, acc1}) + acc2 + "\n" + trailer + "\n",
		"two trailers":        string(seal) + trailer + "\n",
		"trailer extra field": strings.Replace(string(seal), `{"accounts":`, `{"x":1,"accounts":`, 1),
		"trailer extra value": strings.TrimSuffix(string(seal), "\n") + ` {}` + "\n",
		"negative seq":        resealed([]string{hdr, acc1, strings.Replace(acc2, `"seq":`, `"seq":-`, 1)}),
		"header not first":    resealed([]string{acc1, hdr, acc2}),
	} {
		_, _, err := ledger.VerifySeal(ctx, f.pool, strings.NewReader(body))
		require.ErrorIs(t, err, ledger.ErrBadSeal, name)
	}
}
