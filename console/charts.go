package console

import (
	"context"
	"fmt"
	"html"
	"math"
	"net/http"
	"strings"
	"time"
)

// chart is one server-drawn SVG.
type chart struct {
	Title string
	SVG   string
	Note  string
}

func (c *Console) chartsPage(w http.ResponseWriter, r *http.Request, s *Session) {
	charts, err := c.charts(r.Context())
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "charts", view{S: s, Title: "Charts", Nav: "charts", Data: map[string]any{"Charts": charts}})
}

// providersPage shows the circuit breaker of every provider and operation
// (issue 20).
func (c *Console) providersPage(w http.ResponseWriter, r *http.Request, s *Session) {
	c.render(w, r, http.StatusOK, "providers", view{S: s, Title: "Providers", Nav: "providers",
		Data: map[string]any{"Circuits": c.att.Circuits()}})
}

// chartHours is the span of the hourly charts.
const chartHours = 24

func (c *Console) charts(ctx context.Context) ([]chart, error) {
	end := c.clock.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	start := end.Add(-chartHours * time.Hour)
	var out []chart

	// Payouts created per hour, by status.
	counts := map[string][]float64{}
	statuses := []string{"succeeded", "processing", "failed"}
	for _, st := range statuses {
		counts[st] = make([]float64, chartHours)
	}
	rows, err := c.db(ctx).Query(ctx, `SELECT floor(extract(epoch FROM created_at - $1) / 3600)::int, status, count(*)
		FROM payouts WHERE created_at >= $1 AND created_at < $2 GROUP BY 1, 2`, start, end)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var h int
		var st string
		var n int64
		if err := rows.Scan(&h, &st, &n); err != nil {
			rows.Close()
			return nil, err
		}
		if h >= 0 && h < chartHours {
			if _, ok := counts[st]; ok {
				counts[st][h] += float64(n)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out = append(out, chart{Title: "Payouts per hour by status (last 24 h, by creation)",
		SVG: stackedBars(start, counts, statuses, map[string]string{"succeeded": "#1a7f37", "processing": "#0b5cad", "failed": "#b42318"})})

	// Unknown attempts and the review queue, at each hour boundary, from
	// the attempts' own timestamps (an attempt counts as unknown from
	// unknown_at until it resolved; as queued from review_at until it
	// resolved).
	unknown := make([]float64, chartHours+1)
	review := make([]float64, chartHours+1)
	rows, err = c.db(ctx).Query(ctx, `SELECT i,
			(SELECT count(*) FROM attempts a WHERE a.unknown_at <= t AND (a.resolved_at IS NULL OR a.resolved_at > t)),
			(SELECT count(*) FROM attempts a WHERE a.review_at <= t AND (a.resolved_at IS NULL OR a.resolved_at > t OR a.diverged_at IS NOT NULL))
		FROM generate_series(0, $2::int) AS i, LATERAL (SELECT $1::timestamptz + i * interval '1 hour' AS t) x`, start, chartHours)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var i int
		var u, q int64
		if err := rows.Scan(&i, &u, &q); err != nil {
			rows.Close()
			return nil, err
		}
		if i >= 0 && i <= chartHours {
			unknown[i], review[i] = float64(u), float64(q)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out = append(out, chart{Title: "Unknown attempts and review queue size (last 24 h, hourly)",
		SVG: lines(start, map[string][]float64{"unknown": unknown, "review queue": review}, []string{"unknown", "review queue"},
			map[string]string{"unknown": "#9a6700", "review queue": "#b42318"})})

	// Provider call latency percentiles, from the attempts' call events.
	type lat struct {
		provider      string
		n             int64
		p50, p90, p99 float64
	}
	var lats []lat
	rows, err = c.db(ctx).Query(ctx, `SELECT a.provider, count(*),
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM e.ended_at - e.started_at) * 1000),
			percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM e.ended_at - e.started_at) * 1000),
			percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM e.ended_at - e.started_at) * 1000)
		FROM attempt_events e JOIN attempts a ON a.id = e.attempt_id
		WHERE e.type IN ('call', 'lookup') AND e.started_at IS NOT NULL AND e.ended_at IS NOT NULL AND e.started_at >= $1
		GROUP BY a.provider ORDER BY a.provider`, start)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var l lat
		if err := rows.Scan(&l.provider, &l.n, &l.p50, &l.p90, &l.p99); err != nil {
			rows.Close()
			return nil, err
		}
		lats = append(lats, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var labels []string
	var vals [][3]float64
	var ns []int64
	for _, l := range lats {
		labels, vals, ns = append(labels, l.provider), append(vals, [3]float64{l.p50, l.p90, l.p99}), append(ns, l.n)
	}
	out = append(out, chart{Title: "Provider latency percentiles (calls and lookups, last 24 h)",
		SVG: percentiles(labels, vals, ns), Note: "p50, p90 and p99 of each exchange's duration in milliseconds, from the call and lookup events the attempts core records (R12)."})
	return out, nil
}

// ---- drawing ----

const (
	svgW, svgH       = 900, 260
	padL, padR, padT = 50, 140, 16
	padB             = 40
)

func svgOpen(w, h int, title string) *strings.Builder {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" font-family="system-ui, sans-serif" font-size="11">`,
		w, h, w, h, html.EscapeString(title))
	return &b
}

func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// axes draws the y grid (0..max) and hour labels along x.
func axes(b *strings.Builder, start time.Time, slots int, max float64) {
	plotW, plotH := float64(svgW-padL-padR), float64(svgH-padT-padB)
	for i := 0; i <= 4; i++ {
		y := float64(padT) + plotH - plotH*float64(i)/4
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e3e7eb"/>`, padL, y, svgW-padR, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#5c6670">%s</text>`, padL-6, y+4, fmtNum(max*float64(i)/4))
	}
	for i := 0; i <= slots; i += 3 {
		x := float64(padL) + plotW*float64(i)/float64(slots)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#5c6670">%s</text>`, x, svgH-padB+16,
			start.Add(time.Duration(i)*time.Hour).Format("15:04"))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#8c959f"/>`, padL, svgH-padB, svgW-padR, svgH-padB)
}

func legend(b *strings.Builder, names []string, colors map[string]string) {
	for i, n := range names {
		y := padT + 6 + i*18
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`,
			svgW-padR+14, y, colors[n], svgW-padR+32, y+10, html.EscapeString(n))
	}
}

func stackedBars(start time.Time, series map[string][]float64, order []string, colors map[string]string) string {
	n := chartHours
	max := 0.0
	for i := 0; i < n; i++ {
		sum := 0.0
		for _, s := range order {
			sum += series[s][i]
		}
		max = math.Max(max, sum)
	}
	max = niceMax(max)
	b := svgOpen(svgW, svgH, "stacked bars")
	axes(b, start, n, max)
	plotW, plotH := float64(svgW-padL-padR), float64(svgH-padT-padB)
	bw := plotW / float64(n)
	for i := 0; i < n; i++ {
		y := float64(padT) + plotH
		for _, s := range order {
			v := series[s][i]
			if v == 0 {
				continue
			}
			h := plotH * v / max
			y -= h
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`,
				float64(padL)+bw*float64(i)+1, y, bw-2, h, colors[s],
				start.Add(time.Duration(i)*time.Hour).Format("15:04"), html.EscapeString(s), fmtNum(v))
		}
	}
	legend(b, order, colors)
	b.WriteString(`</svg>`)
	return b.String()
}

func lines(start time.Time, series map[string][]float64, order []string, colors map[string]string) string {
	n := chartHours
	max := 0.0
	for _, s := range order {
		for _, v := range series[s] {
			max = math.Max(max, v)
		}
	}
	max = niceMax(max)
	b := svgOpen(svgW, svgH, "lines")
	axes(b, start, n, max)
	plotW, plotH := float64(svgW-padL-padR), float64(svgH-padT-padB)
	for _, s := range order {
		var pts []string
		for i, v := range series[s] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(padL)+plotW*float64(i)/float64(n), float64(padT)+plotH-plotH*v/max))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, colors[s], strings.Join(pts, " "))
	}
	legend(b, order, colors)
	b.WriteString(`</svg>`)
	return b.String()
}

func percentiles(labels []string, vals [][3]float64, ns []int64) string {
	rowH := 34
	h := padT + padB + rowH*max(len(labels), 1)
	b := svgOpen(svgW, h, "latency percentiles")
	if len(labels) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#5c6670">No provider exchanges in the last 24 h.</text></svg>`, padL, padT+20)
		return b.String()
	}
	mx := 0.0
	for _, v := range vals {
		mx = math.Max(mx, v[2])
	}
	mx = niceMax(mx)
	left, plotW := 120, float64(svgW-120-padR)
	colors := [3]string{"#1a7f37", "#9a6700", "#b42318"}
	names := [3]string{"p50", "p90", "p99"}
	for i, l := range labels {
		y := padT + i*rowH
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s (%d)</text>`, left-8, y+17, html.EscapeString(l), ns[i])
		for k := 2; k >= 0; k-- {
			wd := plotW * vals[i][k] / mx
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="22" fill="%s" opacity="%.2f"><title>%s %s: %.0f ms</title></rect>`,
				left, y+4, wd, colors[k], 0.55+0.15*float64(k), html.EscapeString(l), names[k], vals[i][k])
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#1b1f24">p50 %.0f · p90 %.0f · p99 %.0f ms</text>`,
			float64(left)+plotW*vals[i][2]/mx+6, y+19, vals[i][0], vals[i][1], vals[i][2])
	}
	axisY := padT + rowH*len(labels) + 4
	for i := 0; i <= 4; i++ {
		x := float64(left) + plotW*float64(i)/4
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#5c6670">%s ms</text>`, x, axisY+14, fmtNum(mx*float64(i)/4))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
