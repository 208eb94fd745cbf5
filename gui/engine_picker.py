"""The engine list of the setup panel: a preset selector, a filter box, and the engines grouped by
family or precision under section headers. Unavailable engines are greyed with the reason and
the install command as a tooltip. Families and precisions come from the registry's rows
(backends/families.py); presets from backends/presets.py, resolved to the engines available here.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from whistle_stop.backends import presets, registry
from whistle_stop.backends.families import PrecisionGroup, family, family_label, precision_group
from whistle_stop.backends.registry import EngineSpec

from .theme import current_theme

NAME_ROLE = Qt.ItemDataRole.UserRole  # an engine's name (None on a section header)
HEADER_ROLE = Qt.ItemDataRole.UserRole + 1
PRESET_PROMPT = "Preset…"
GROUPINGS = ("by family", "by precision")


class EnginePicker(QWidget):
    changed = Signal()

    def __init__(self, specs: list[EngineSpec], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.specs = {s.name: s for s in specs}
        self._available = {name: registry.available(name) for name in self.specs}
        self._filling = False
        self._preset_engines: set[str] = set()  # what the chosen preset ticked (a change by hand leaves it)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.preset = QComboBox()
        self.preset.addItem(PRESET_PROMPT)
        for index, name in enumerate(presets.preset_names(), start=1):
            self.preset.addItem(name)
            self.preset.setItemData(index, presets.PRESET_HELP[presets.Preset(name)], Qt.ItemDataRole.ToolTipRole)
        self.preset.setToolTip("tick a named set of the engines available here")
        self.preset.activated.connect(self._on_preset)
        self.grouping = QComboBox()
        self.grouping.addItems(list(GROUPINGS))
        self.grouping.setToolTip("group the engines by family or by precision")
        self.grouping.currentIndexChanged.connect(lambda _i: self._fill(self.selected()))
        row.addWidget(self.preset, 1)
        row.addWidget(self.grouping)
        self.preset_note = QLabel()
        self.preset_note.setObjectName("muted")
        self.preset_note.setWordWrap(True)
        self.preset_note.setVisible(False)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter engines by name or description…")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._apply_filter)
        self.list = QListWidget()
        self.list.setMinimumHeight(190)
        self.list.itemChanged.connect(self._on_item_changed)
        layout.addLayout(row)
        layout.addWidget(self.preset_note)
        layout.addWidget(self.filter)
        layout.addWidget(self.list)
        self._fill({presets.default_reference()} & set(self.specs))  # the reference ticked at first

    # --- reading and writing ------------------------------------------------------------------
    def selected(self) -> list[str]:
        """The ticked engines, in registry order (the order the run uses)."""
        ticked = {
            self.list.item(i).data(NAME_ROLE)
            for i in range(self.list.count())
            if self.list.item(i).data(NAME_ROLE) and self.list.item(i).checkState() == Qt.CheckState.Checked
        }
        return [name for name in self.specs if name in ticked]

    def set_selected(self, names: list[str] | set[str]) -> None:
        wanted = set(names)
        self._filling = True
        for item in self._engine_items():
            if item.flags() & Qt.ItemFlag.ItemIsUserCheckable:
                item.setCheckState(Qt.CheckState.Checked if item.data(NAME_ROLE) in wanted else Qt.CheckState.Unchecked)
        self._filling = False
        self.changed.emit()

    def apply_preset(self, name: str) -> presets.PresetChoice:
        """Tick the preset's engines (available ones only) and say what it skipped and why."""
        choice = presets.resolve(name)
        self.set_selected(set(choice.engines))
        self.preset.setCurrentText(name)
        skipped = len(choice.skipped)
        self.preset_note.setText(
            f"{len(choice.engines)} engines" + (f"; {skipped} skipped (hover for why)" if skipped else "")
        )
        self.preset_note.setToolTip("\n".join(choice.lines()))
        self.preset.setToolTip("\n".join(choice.lines()))
        self.preset_note.setVisible(True)
        self._preset_engines = set(choice.engines)
        return choice

    def visible_names(self) -> list[str]:
        return [item.data(NAME_ROLE) for item in self._engine_items() if not item.isHidden()]

    def headers(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count()) if self.list.item(i).data(HEADER_ROLE)]

    # --- building -----------------------------------------------------------------------------
    def _group_of(self, spec: EngineSpec) -> str:
        if self.grouping.currentText() == GROUPINGS[1]:
            return precision_group(spec.precision).value
        return family_label(family(spec))

    def _group_order(self) -> list[str]:
        groups = list(dict.fromkeys(self._group_of(s) for s in self.specs.values()))
        if self.grouping.currentText() == GROUPINGS[1]:
            rank = [g.value for g in PrecisionGroup]
            groups.sort(key=lambda g: rank.index(g) if g in rank else len(rank))
        return groups

    def _fill(self, ticked: list[str] | set[str]) -> None:
        """The list grouped under section headers, keeping what was ticked."""
        self._filling = True
        self.list.clear()
        header_font = QFont(self.list.font())
        header_font.setBold(True)
        muted = QColor(current_theme().muted)
        for group in self._group_order():
            header = QListWidgetItem(group)
            header.setData(HEADER_ROLE, True)
            header.setFlags(Qt.ItemFlag.NoItemFlags)
            header.setFont(header_font)
            header.setForeground(muted)
            self.list.addItem(header)
            for spec in self.specs.values():
                if self._group_of(spec) == group:
                    self.list.addItem(self._engine_item(spec, spec.name in set(ticked)))
        self._filling = False
        self._apply_filter(self.filter.text())

    def _engine_item(self, spec: EngineSpec, ticked: bool) -> QListWidgetItem:
        ok, why = self._available[spec.name]
        item = QListWidgetItem(f"  {spec.name}  ·  {spec.precision}")
        item.setData(NAME_ROLE, spec.name)
        if ok:
            item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked)
            item.setToolTip(spec.description)
        else:
            item.setFlags(Qt.ItemFlag.NoItemFlags)  # greyed, cannot be ticked
            item.setToolTip(f"{spec.description}\nunavailable: {why}")
        return item

    def _engine_items(self) -> list[QListWidgetItem]:
        return [self.list.item(i) for i in range(self.list.count()) if self.list.item(i).data(NAME_ROLE)]

    # --- reactions ----------------------------------------------------------------------------
    def _apply_filter(self, text: str) -> None:
        words = text.lower().split()
        header: QListWidgetItem | None = None
        shown_under_header = False
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(HEADER_ROLE):
                if header is not None:
                    header.setHidden(not shown_under_header)
                header, shown_under_header = item, False
                continue
            spec = self.specs[item.data(NAME_ROLE)]
            haystack = f"{spec.name} {spec.description} {spec.precision}".lower()
            hidden = not all(word in haystack for word in words)
            item.setHidden(hidden)
            shown_under_header = shown_under_header or not hidden
        if header is not None:
            header.setHidden(not shown_under_header)

    def _on_preset(self, index: int) -> None:
        if index > 0:
            self.apply_preset(self.preset.itemText(index))

    def _on_item_changed(self, _item: QListWidgetItem) -> None:
        if self._filling:
            return
        if self.preset.currentIndex() > 0 and set(self.selected()) != self._preset_engines:
            self.preset.setCurrentIndex(0)  # ticked by hand: no longer the preset
            self.preset_note.setVisible(False)
            self.preset.setToolTip("tick a named set of the engines available here")
        self.changed.emit()
