package main

import (
	"fmt"
	"math"
	"strings"
)

// A small SVG line chart writer for the churn plot: panels stacked one
// above the other, sharing the x axis (seconds), each with its own y axis
// and legend. Hand-written because the plot needs lines, ticks and labels
// only.

type svgPoint struct{ x, y float64 }

type svgSeries struct {
	name   string
	color  string
	dashed bool
	points []svgPoint
}

type svgPanel struct {
	title  string
	ylabel string
	series []svgSeries
	// marks are vertical lines (the TTL boundaries), in x units.
	marks []float64
}

const (
	svgWidth       = 900
	svgPanelHeight = 230
	svgLeft        = 80
	svgRight       = 190 // room for the legend
	svgTop         = 30
	svgBottom      = 40
)

// renderSVG draws the panels over x from 0 to xmax, labelled xlabel.
func renderSVG(title, xlabel string, xmax float64, panels []svgPanel) string {
	var w strings.Builder
	h := len(panels)*svgPanelHeight + 20
	fmt.Fprintf(&w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, h, svgWidth, h)
	fmt.Fprintf(&w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&w, `<text x="%d" y="16" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, xmlEscape(title))
	for i, p := range panels {
		top := float64(20 + i*svgPanelHeight + svgTop)
		height := float64(svgPanelHeight - svgTop - svgBottom)
		left, width := float64(svgLeft), float64(svgWidth-svgLeft-svgRight)
		ymax := 0.0
		for _, s := range p.series {
			for _, pt := range s.points {
				ymax = math.Max(ymax, pt.y)
			}
		}
		ymax = niceCeil(ymax)
		x := func(v float64) float64 { return left + v/xmax*width }
		y := func(v float64) float64 { return top + height - v/ymax*height }
		fmt.Fprintf(&w, `<text x="%.0f" y="%.0f" font-size="12" font-weight="bold">%s</text>`+"\n", left, top-8, xmlEscape(p.title))
		// Axes, grid and ticks.
		fmt.Fprintf(&w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", left, top, width, height)
		for k := 0; k <= 4; k++ {
			v := ymax * float64(k) / 4
			fmt.Fprintf(&w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+width, y(v))
			fmt.Fprintf(&w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-5, y(v)+4, fmtTick(v))
		}
		step := niceCeil(xmax / 8)
		for v := 0.0; v <= xmax+1e-9; v += step {
			fmt.Fprintf(&w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(v), top+height+14, fmtTick(v))
		}
		for _, m := range p.marks {
			fmt.Fprintf(&w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-dasharray="2,3"/>`+"\n", x(m), top, x(m), top+height)
		}
		fmt.Fprintf(&w, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
			left-55, top+height/2, left-55, top+height/2, xmlEscape(p.ylabel))
		if i == len(panels)-1 {
			fmt.Fprintf(&w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+width/2, top+height+30, xmlEscape(xlabel))
		}
		// Lines and legend.
		for j, s := range p.series {
			var pts []string
			for _, pt := range s.points {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(pt.x), y(pt.y)))
			}
			dash := ""
			if s.dashed {
				dash = ` stroke-dasharray="6,3"`
			}
			fmt.Fprintf(&w, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n", s.color, dash, strings.Join(pts, " "))
			ly := top + 10 + float64(j)*16
			fmt.Fprintf(&w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n",
				left+width+10, ly, left+width+30, ly, s.color, dash)
			fmt.Fprintf(&w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+width+35, ly+4, xmlEscape(s.name))
		}
	}
	w.WriteString("</svg>\n")
	return w.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
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

func fmtTick(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
