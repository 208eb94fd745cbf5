"""One engine's pane: a coloured header, the prompt (greyed) and its generated text, a status
line with live numbers, and a thin progress bar. Text arrives in per-tick batches."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QSizePolicy, QTextEdit, QVBoxLayout, QWidget

from .theme import Theme, current_theme


def _utf16_len(text: str) -> int:
    """Qt counts document positions in UTF-16 units (an emoji is two)."""
    return len(text.encode("utf-16-le")) // 2


class ThinBar(QWidget):
    """A 5 px progress bar. QProgressBar repaints synchronously on every setValue; this one
    schedules one paint per change, which the event loop merges with the rest of the tick."""

    def __init__(self, colour: QColor, track: QColor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedHeight(5)
        self.colour, self.track = QColor(colour), QColor(track)
        self.fraction: float | None = 0.0  # None: busy (length unknown)

    def set_fraction(self, fraction: float | None) -> None:
        if fraction != self.fraction:
            self.fraction = fraction
            self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(self.track)
        painter.drawRoundedRect(QRectF(self.rect()), 2, 2)
        painter.setBrush(self.colour)
        if self.fraction is None:  # busy: a static striped bar (no animation timer to wake us)
            for x in range(0, self.width(), 16):
                painter.drawRect(QRectF(x, 0, 8, self.height()))
        elif self.fraction > 0:
            painter.drawRoundedRect(QRectF(0, 0, self.width() * min(1.0, self.fraction), self.height()), 2, 2)
        painter.end()


class ElidedLabel(QLabel):
    """One line of text, cut with "…" where it is wider than the pane (the whole line in its
    tooltip). A QLabel is at least as wide as its text, so a long error, or a run's figures on
    three panes side by side, would widen the window past the screen."""

    detail = ""  # a tooltip of its own (an error's traceback), shown instead of the whole line

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(0, super().sizeHint().height())

    def setText(self, text: str) -> None:
        super().setText(text)
        self._update_tip()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._update_tip()

    def elided(self) -> str:
        """The text as painted."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def set_detail(self, detail: str) -> None:
        self.detail = detail
        self._update_tip()

    def _update_tip(self) -> None:
        self.setToolTip(self.detail or (self.text() if self.elided() != self.text() else ""))

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        self.style().drawItemText(
            painter,
            self.contentsRect(),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            self.palette(),
            self.isEnabled(),
            self.elided(),
            QPalette.ColorRole.WindowText,
        )
        painter.end()


class StreamPane(QFrame):
    def __init__(self, name: str, colour: QColor, description: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.colour = QColor(colour)
        self.setObjectName("streamPane")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._offsets: list[int] = []  # document position where each token's text starts
        self._prompt_end = 0
        self._diverged: int | None = None

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(4)
        header = QHBoxLayout()
        header.setSpacing(6)
        self.swatch = QLabel()
        self.swatch.setFixedSize(12, 12)
        self.title = QLabel(name)
        self.title.setToolTip(description)
        font = self.title.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.1)
        self.title.setFont(font)
        self.tag = QLabel()
        self.tag.setObjectName("paneTag")
        header.addWidget(self.swatch)
        header.addWidget(self.title)
        header.addStretch(1)
        header.addWidget(self.tag)
        layout.addLayout(header)

        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setUndoRedoEnabled(False)
        self.text.setFrameShape(QFrame.Shape.NoFrame)
        self.text.setMinimumHeight(60)
        layout.addWidget(self.text, 1)
        self.status = ElidedLabel("waiting")
        self.status.setObjectName("paneStatus")
        layout.addWidget(self.status)
        self.progress = ThinBar(self.colour, QColor("#888888"))
        layout.addWidget(self.progress)
        self.apply_theme(current_theme())

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        colour = self.colour.name()
        self.swatch.setStyleSheet(f"background: {colour}; border-radius: 3px;")
        self.setStyleSheet(
            f"#streamPane {{ border: 1px solid {theme.border}; border-top: 3px solid {colour}; "
            f"border-radius: 6px; background: {theme.pane_bg}; }}"
            f"#paneStatus {{ color: {theme.muted}; }}"
        )
        self.progress.track = QColor(theme.border)
        self.progress.update()
        self.text.setStyleSheet(f"background: {theme.pane_bg}; color: {theme.text};")

    # --- content ----------------------------------------------------------------------------
    def reset(self, prompt: str) -> None:
        """Start a new run: the prompt in grey, nothing generated yet."""
        self.text.clear()
        self._offsets.clear()
        self._diverged = None
        self.text.setExtraSelections([])
        prompt_format = QTextCharFormat()
        prompt_format.setForeground(QColor(self.theme.muted))
        cursor = QTextCursor(self.text.document())
        cursor.insertText(prompt, prompt_format)
        self._prompt_end = cursor.position()
        self.progress.set_fraction(0.0)

    def append(self, texts: list[str]) -> None:
        """Append one text delta per token (some may be empty while a character is incomplete)."""
        if not texts:
            return
        bar = self.text.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4  # keep following the end unless the user scrolled up
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        position = cursor.position()
        for text in texts:
            self._offsets.append(position)
            position += _utf16_len(text)
        body = QTextCharFormat()
        body.setForeground(QColor(self.theme.text))
        cursor.insertText("".join(texts), body)
        if follow:
            bar.setValue(bar.maximum())

    def generated_text(self) -> str:
        return self.text.toPlainText()[self._prompt_end :]

    @property
    def token_count(self) -> int:
        return len(self._offsets)

    def set_tag(self, text: str, kind: str = "info") -> None:
        colours = {"info": self.theme.muted, "ok": self.theme.ok, "warn": "#d89a00", "error": self.theme.error}
        self.tag.setText(text)
        self.tag.setStyleSheet(f"color: {colours.get(kind, self.theme.muted)}; font-weight: bold;")

    def set_status(self, text: str) -> None:
        if text != self.status.text():
            self.status.setText(text)

    def set_progress(self, value: int, maximum: int) -> None:
        """maximum 0: busy (unknown length, e.g. loading). Kept in whole percent: 1,000 tokens
        need 100 repaints of the bar, not 1,000."""
        self.progress.set_fraction(None if maximum <= 0 else min(100, int(100 * value / maximum)) / 100)

    def show_error(self, message: str, detail: str = "") -> None:
        """The engine failed: say so in the pane itself, keep what it produced."""
        error_format = QTextCharFormat()
        error_format.setForeground(QColor(self.theme.error))
        error_format.setFontWeight(700)
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(f"\n\n⚠ {message}", error_format)
        self.set_tag("failed", "error")
        self.set_status(message)
        self.status.set_detail(detail or message)
        self.set_progress(0, 1)

    def mark_divergence(self, index: int | None, reference: str) -> None:
        """Highlight the first token that differs from the reference (None: agrees so far)."""
        if index == self._diverged:
            return
        self._diverged = index
        if index is None or index >= len(self._offsets):
            self.text.setExtraSelections([])
            return
        start = self._offsets[index]
        later = [o for o in self._offsets[index + 1 :] if o > start]
        end = later[0] if later else self.text.document().characterCount() - 1
        selection = QTextEdit.ExtraSelection()
        cursor = QTextCursor(self.text.document())
        cursor.setPosition(start)
        cursor.setPosition(max(start, end), QTextCursor.MoveMode.KeepAnchor)
        selection.cursor = cursor
        selection.format.setBackground(QColor(self.theme.diverge_bg))
        selection.format.setProperty(QTextFormat.Property.FullWidthSelection, False)
        self.text.setExtraSelections([selection])
        self.set_tag(f"differs from {reference} at token {index}", "warn")

    @property
    def divergence(self) -> int | None:
        return self._diverged
