package api_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestMain runs the tests, then (on a full, passing run) checks that every
// operation in docs/openapi.yaml was exercised by at least one request that
// the helper validated: the document cannot describe routes nobody tests.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		doc, err := openapi3.NewLoader().LoadFromFile("../docs/openapi.yaml")
		if err != nil {
			fmt.Fprintln(os.Stderr, "openapi coverage:", err)
			os.Exit(1)
		}
		_ = doc.Validate(context.Background())
		var missing []string
		total := 0
		for path, item := range doc.Paths.Map() {
			for method := range item.Operations() {
				total++
				if _, ok := exercised.Load(method + " " + path); !ok {
					missing = append(missing, method+" "+path)
				}
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "openapi coverage: %d documented operations were never exercised by a validated request:\n", len(missing))
			for _, m := range missing {
				fmt.Fprintln(os.Stderr, "  "+m)
			}
			code = 1
		} else {
			fmt.Printf("openapi coverage: all %d documented operations exercised and validated\n", total)
		}
	}
	os.Exit(code)
}
