package conformance

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteChecks writes one line per check: its name, whether it performs real
// effects, and what it checks. With noEffects, checks that perform effects
// are marked as skipped.
func WriteChecks(w io.Writer, checks []CheckInfo, noEffects bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range checks {
		mark := "reads"
		if c.Effects {
			mark = "EFFECTS"
			if noEffects {
				mark = "effects, skipped"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, mark, c.Description)
	}
	return tw.Flush()
}
