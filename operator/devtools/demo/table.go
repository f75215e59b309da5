package demo

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Row is one stage as the live table shows it.
type Row struct {
	// Stage is dev, test or prod.
	Stage string
	// Stack is namespace/name.
	Stack string
	// Commit is the program commit the Stack last applied (short).
	Commit string
	// State is the Stack's state: Ready, or Reconciling/Stalled with the
	// reason.
	State string
	// Health is the Argo CD Application's health and sync status.
	Health string
	// LastUpdate is the last Update's type, state and name.
	LastUpdate string
	// Since is when State and Commit last changed.
	Since time.Time
	// Freight and Promotion, when Kargo runs: the Freight the Kargo Stage
	// holds (alias and commit) and its last Promotion's phase.
	Freight, Promotion string
}

// key is what a change of the table is judged by (not the elapsed times).
func (r Row) key() string {
	return strings.Join([]string{r.Stage, r.Stack, r.Commit, r.State, r.Health, r.LastUpdate, r.Freight, r.Promotion}, "\x00")
}

// RenderTable renders the rows as an aligned text table, with each row's
// time in its state as of now.
func RenderTable(rows []Row, now time.Time) string {
	// The Kargo columns appear when Kargo runs (a row has them).
	kargo := false
	for _, r := range rows {
		kargo = kargo || r.Freight != "" || r.Promotion != ""
	}
	header := []string{"STAGE", "STACK", "COMMIT", "STACK STATE", "ARGO CD", "LAST UPDATE", "ELAPSED"}
	if kargo {
		header = append([]string{"STAGE", "FREIGHT", "PROMOTION"}, header[1:]...)
	}
	cells := [][]string{header}
	for _, r := range rows {
		elapsed := "-"
		if !r.Since.IsZero() {
			elapsed = formatDuration(now.Sub(r.Since))
		}
		row := []string{r.Stack, orDash(r.Commit), truncate(orDash(r.State), 44), orDash(r.Health), truncate(orDash(r.LastUpdate), 40), elapsed}
		if kargo {
			row = append([]string{r.Stage, orDash(r.Freight), truncate(orDash(r.Promotion), 24)}, row...)
		} else {
			row = append([]string{r.Stage}, row...)
		}
		cells = append(cells, row)
	}
	widths := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, row := range cells {
		for i, c := range row {
			if i == len(row)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c + strings.Repeat(" ", widths[i]-len([]rune(c))+2))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// screen writes the demo's narration and keeps the live table below it:
// redrawn in place on a terminal (live), else printed again whenever a row
// changes.
type screen struct {
	mu    sync.Mutex
	out   io.Writer
	live  bool
	start time.Time
	rows  []Row
	// drawn is how many lines of table are on screen (live).
	drawn int
	// seen is each stage's row as last printed (not live).
	seen map[string]string
	// paused stops drawing while a question waits for its answer.
	paused bool
}

func newScreen(out io.Writer, live bool, start time.Time) *screen {
	return &screen{out: out, live: live, start: start}
}

// Say prints a line of narration.
func (s *screen) Say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	s.erase()
	fmt.Fprintf(s.out, "[%s] %s\n", formatDuration(time.Since(s.start)), fmt.Sprintf(format, args...))
	s.draw(true)
}

// Update replaces the table's rows and redraws it (live), or prints it when
// something changed.
func (s *screen) Update(rows []Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = rows
	if s.paused {
		return
	}
	if s.live {
		s.erase()
		s.draw(true)
		return
	}
	// Not live: a line per row that changed, under the narration.
	for _, r := range rows {
		if k := r.key(); s.seen[r.Stage] != k {
			if s.seen == nil {
				s.seen = map[string]string{}
			}
			s.seen[r.Stage] = k
			fmt.Fprintf(s.out, "[%s]   %s\n", formatDuration(time.Since(s.start)), RowLine(r))
		}
	}
}

// RowLine is a row on one line, for output that is not redrawn.
func RowLine(r Row) string {
	line := fmt.Sprintf("%-7s %-26s %-36s Argo CD %-20s last update: %s", r.Stage, "commit "+orDash(r.Commit), orDash(r.State), orDash(r.Health), orDash(r.LastUpdate))
	if r.Freight != "" || r.Promotion != "" {
		line += fmt.Sprintf("; Freight %s, Promotion %s", orDash(r.Freight), orDash(r.Promotion))
	}
	return line
}

// Ask prints the table once more and the question after it, and draws
// nothing until Say resumes the narration.
func (s *screen) Ask(question string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.erase()
	fmt.Fprint(s.out, RenderTable(s.rows, time.Now()))
	fmt.Fprint(s.out, question)
	s.paused = true
}

// Print prints the table once more, below the narration, and leaves it.
func (s *screen) Print() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.erase()
	fmt.Fprint(s.out, RenderTable(s.rows, time.Now()))
	s.drawn = 0
}

func (s *screen) erase() {
	if s.live && s.drawn > 0 {
		fmt.Fprintf(s.out, "\x1b[%dA\x1b[J", s.drawn)
		s.drawn = 0
	}
}

func (s *screen) draw(liveOnly bool) {
	if len(s.rows) == 0 || (liveOnly && !s.live) {
		return
	}
	t := RenderTable(s.rows, time.Now())
	fmt.Fprint(s.out, t)
	if s.live {
		s.drawn = strings.Count(t, "\n")
	}
}
