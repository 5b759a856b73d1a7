package console

import (
	"context"
	"net/http"
)

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

func (c *Console) charts(ctx context.Context) ([]chart, error) { return nil, nil }
