"""The left dock: model, engines, prompt and generation parameters, run mode, and the Run button.

Ranges on every spin box make invalid values impossible to type; what can still be wrong
(an empty prompt, a prompt that does not fit the context, no engine) disables Run and says why.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from whistle_stop.backends import registry
from whistle_stop.backends.engine_settings import options_class
from whistle_stop.backends.machine.threads import default_threads
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.runs.bench import BenchConfig
from whistle_stop.backends.runs.estimate import estimate
from whistle_stop.backends.sampling import SamplingParams
from whistle_stop.backends.sources.model_files import RANDOM_LABEL, random_config_names
from whistle_stop.backends.sources.prompts import example_prompts
from whistle_stop.backends.sources.tokenizer import encode

from .engine_options_form import EngineOptionsForm
from .engine_picker import EnginePicker
from .job_manager import JobManager
from .model_probe import HUB_MODELS, ModelInfo, ModelProbe
from .theme import current_theme, icon
from .widgets import dspin, set_clamped, spin

LOCAL_FOLDER = "Local folder…"
MODE_HELP = {
    "fair": "Engines run one at a time, so each has the machine to itself. Replay then races the measured runs.",
    "race": "All engines run at once for the spectacle: they share the cores, so timings are contended.",
}


class SetupPanel(QWidget):
    changed = Signal()
    run_requested = Signal()

    def __init__(self, jobs: JobManager, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.jobs = jobs  # whether an engine job runs is read there: the panel is locked meanwhile
        self.model_info = ModelInfo("auto", 1024, None)
        self._prompt_tokens = 0
        self._folders: list[str] = []
        self._built = False  # no reactions while the widgets are being made
        self._count_timer = QTimer(self, singleShot=True, interval=120)  # debounce: encode once per pause
        self._count_timer.timeout.connect(self._count_tokens)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(10)
        layout.addWidget(self._model_group())
        layout.addWidget(self._engines_group())
        self.option_forms: dict[str, EngineOptionsForm] = {}  # per engine with settings, shown while ticked
        for spec in self._specs():
            settings_class = options_class(spec.options)
            if settings_class is not None:
                form = self.option_forms[spec.name] = EngineOptionsForm(settings_class)
                form.changed.connect(self._changed)
                layout.addWidget(form)
        layout.addWidget(self._prompt_group())
        layout.addWidget(self._generation_group())
        layout.addWidget(self._mode_group())
        self.run_button = QPushButton(icon("run"), "  Run")
        self.run_button.setMinimumHeight(36)
        font = self.run_button.font()
        font.setBold(True)
        self.run_button.setFont(font)
        self.run_button.clicked.connect(self.run_requested)
        self.reason = QLabel()
        self.reason.setWordWrap(True)
        layout.addWidget(self.run_button)
        layout.addWidget(self.reason)
        layout.addStretch(1)
        self._built = True
        jobs.changed.connect(self._on_jobs_changed)
        self.probe = ModelProbe(self)
        self.probe.info.connect(self.set_model_info)
        self.probe.probe(self.model_spec())
        self._count_tokens()

    # --- building ---------------------------------------------------------------------------
    def _model_group(self) -> QGroupBox:
        box = QGroupBox("Model")
        form = QVBoxLayout(box)
        self.model_combo = QComboBox()
        self.model_combo.addItems(["auto", *HUB_MODELS, *(f"random:{n}" for n in random_config_names()), LOCAL_FOLDER])
        self.model_combo.setToolTip("auto: gpt2 from the cache or the hub, else random:gpt2 (offline)")
        self.model_combo.currentTextChanged.connect(self._on_source)
        self._previous_source = "auto"
        self.badge = QLabel(RANDOM_LABEL)
        self.badge.setObjectName("randomBadge")
        self.badge.setVisible(False)
        self.notice = QLabel()
        self.notice.setObjectName("notice")
        self.notice.setWordWrap(True)
        self.notice.setVisible(False)
        self.model_detail = QLabel()
        self.model_detail.setWordWrap(True)
        self.model_detail.setObjectName("muted")
        form.addWidget(self.model_combo)
        form.addWidget(self.badge, 0, Qt.AlignmentFlag.AlignLeft)
        form.addWidget(self.notice)
        form.addWidget(self.model_detail)
        return box

    def _engines_group(self) -> QGroupBox:
        box = QGroupBox("Engines")
        form = QVBoxLayout(box)
        self.picker = EnginePicker(self._specs())
        self.engines = self.picker.list
        self.picker.changed.connect(self._changed)
        self.estimate_label = QLabel()
        self.estimate_label.setObjectName("muted")
        self.estimate_label.setWordWrap(True)
        self.estimate_label.setToolTip(
            "before Run: the runs, the one-time builds still to make (cached artefacts "
            "missing) and a rough time from the median of what each engine measured here in its last "
            "runs, or, for one never run here, a guess from the model's size and this machine's bandwidth"
        )
        usable = default_threads()
        self.threads = spin(
            0,
            max(1, os.cpu_count() or 1) * 2,
            0,
            "threads per engine; 0 = the usable physical cores, capped by the cgroup's CPU quota",
            special=f"usable cores ({usable})",
        )
        self.threads.valueChanged.connect(self._changed)
        row = QFormLayout()
        row.addRow("Threads", self.threads)
        self.cold = QCheckBox("Start cold")
        self.cold.setToolTip(
            "evict the weights and each engine's cached artefact files from the page cache "
            "before the engine starts (Linux): its load then reads the disk"
        )
        self.cold.toggled.connect(self._changed)
        row.addRow("", self.cold)
        form.addWidget(self.picker)
        form.addWidget(self.estimate_label)
        form.addLayout(row)
        return box

    def _specs(self) -> list[EngineSpec]:
        return list(registry.ENGINES.values())

    def _prompt_group(self) -> QGroupBox:
        box = QGroupBox("Prompt")
        form = QVBoxLayout(box)
        self.examples = QComboBox()
        self.examples.addItem("Bundled example prompts…")
        self._examples = example_prompts()
        self.examples.addItems(list(self._examples))
        self.examples.activated.connect(self._on_example)
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt…")
        self.prompt.setPlainText(next(iter(self._examples.values()), "Hello"))
        self.prompt.setFixedHeight(96)
        self.prompt.textChanged.connect(self._count_timer.start)
        self.counter = QLabel()
        self.counter.setAlignment(Qt.AlignmentFlag.AlignRight)
        form.addWidget(self.examples)
        form.addWidget(self.prompt)
        form.addWidget(self.counter)
        return box

    def _generation_group(self) -> QGroupBox:
        box = QGroupBox("Generation")
        form = QFormLayout(box)
        self.new_tokens = spin(1, 4096, 100, "tokens to generate per run (no early stop)")
        self.decoding = QComboBox()
        self.decoding.addItems(["greedy", "sample"])
        self.decoding.setToolTip("greedy: engines must agree token for token; sample: seeded, same sampler for all")
        self.temperature = dspin(0.05, 5.0, 1.0, 0.05, "sampling temperature")
        self.top_k = spin(0, 50257, 0, "sample from the k most likely tokens; 0 = off", special="off")
        self.top_p = dspin(0.01, 1.0, 1.0, 0.05, "nucleus sampling mass; 1 = off")
        self.seed = spin(0, 2**31 - 1, 0, "sampler seed")
        self.repeats = spin(1, 50, 3, "measured runs per engine")
        self.warmup = spin(0, 10, 1, "warm-up runs per engine, recorded but not summarised")
        # --repeats auto: rounds until every engine's median interval is narrow enough; Repeats is then the most
        self.until_sure = QCheckBox("until sure")
        self.until_sure.setToolTip(
            "repeat rounds until every engine's median ms/token interval is narrower than the width "
            "(at most Repeats rounds and the minutes); its level holds although the data choose the stop"
        )
        self.target_width = dspin(0.5, 50.0, 5.0, 0.5, "the median interval's width to reach, % of the median")
        self.target_width.setSuffix(" %")
        self.max_minutes = dspin(0.5, 600.0, 10.0, 1.0, "stop the measured rounds after this many minutes")
        self.max_minutes.setSuffix(" min")
        repeats_row = QWidget()
        row = QHBoxLayout(repeats_row)
        row.setContentsMargins(0, 0, 0, 0)
        for widget in (self.repeats, self.until_sure, self.target_width, self.max_minutes):
            row.addWidget(widget)
        self.until_sure.toggled.connect(self._on_until_sure)
        self._on_until_sure(False)
        for label, widget in [
            ("Max new tokens", self.new_tokens),
            ("Decoding", self.decoding),
            ("Temperature", self.temperature),
            ("Top-k", self.top_k),
            ("Top-p", self.top_p),
            ("Seed", self.seed),
            ("Repeats", repeats_row),
            ("Warm-up runs", self.warmup),
        ]:
            form.addRow(label, widget)
        for number in (self.new_tokens, self.top_k, self.seed, self.repeats, self.warmup):
            number.valueChanged.connect(self._changed)
        for fraction in (self.temperature, self.top_p):
            fraction.valueChanged.connect(self._changed)
        self.new_tokens.valueChanged.connect(self._update_counter)
        self.decoding.currentTextChanged.connect(self._on_decoding)
        self._on_decoding(self.decoding.currentText())
        return box

    def _mode_group(self) -> QGroupBox:
        box = QGroupBox("Run mode")
        form = QVBoxLayout(box)
        row = QHBoxLayout()
        self.fair = QRadioButton("Fair")
        self.race = QRadioButton("Race")
        self.fair.setChecked(True)
        self._mode_buttons = QButtonGroup(self)
        for button in (self.fair, self.race):
            self._mode_buttons.addButton(button)
            row.addWidget(button)
        row.addStretch(1)
        self.mode_help = QLabel(MODE_HELP["fair"])
        self.mode_help.setWordWrap(True)
        self.mode_help.setObjectName("muted")
        self.fair.toggled.connect(self._on_mode)
        form.addLayout(row)
        form.addWidget(self.mode_help)
        return box

    # --- reading ----------------------------------------------------------------------------
    def model_spec(self) -> str:
        return self.model_combo.currentText()

    def selected_engines(self) -> list[str]:
        return self.picker.selected()

    def mode(self) -> str:
        return "race" if self.race.isChecked() else "fair"

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            self.decoding.currentText(),
            self.temperature.value(),
            self.top_k.value(),
            self.top_p.value(),
            self.seed.value(),
        )

    def _on_until_sure(self, on: bool) -> None:
        self.target_width.setEnabled(on)
        self.max_minutes.setEnabled(on)
        self.repeats.setToolTip("the most rounds (until sure)" if on else "measured runs per engine")
        if on and self.repeats.value() < 8:
            self.repeats.setValue(40)  # the rule's first look needs 8 rounds
        self._changed()

    def config(self) -> BenchConfig:
        engines = tuple(self.selected_engines())
        options = {name: form.settings() for name, form in self.option_forms.items() if name in engines}
        return BenchConfig(
            model=self.model_spec(),
            backends=engines,
            prompt=self.prompt.toPlainText(),
            new_tokens=self.new_tokens.value(),
            sampling=self.sampling(),
            repeats=self.repeats.value(),
            repeats_auto=self.until_sure.isChecked(),
            target_width_pct=self.target_width.value(),
            max_minutes=self.max_minutes.value(),
            warmup=self.warmup.value(),
            threads=self.threads.value(),
            mode=self.mode(),
            engine_options=options,
            cold=self.cold.isChecked(),
            calibrate_harness=True,
        )  # as bench does: the null engine after the engines

    def settings_problem(self) -> str:
        """What is wrong with the model, engines or engine settings (shared by Run, Sweep, Quality)."""
        if self.model_info.error:
            return self.model_info.error
        if self.model_info.pending:
            return "checking the model folder…"
        if not self.selected_engines():
            return "select at least one engine"
        for name in self.selected_engines():
            problem = self.option_forms[name].problem() if name in self.option_forms else ""
            if problem:
                return problem
        return ""

    def problem(self) -> str:
        """Why Run cannot start now, or ""."""
        if self.jobs.busy():
            return "a run is in progress"
        if self.settings_problem():
            return self.settings_problem()
        if not self.prompt.toPlainText().strip():
            return "the prompt is empty"
        context, total = self.model_info.context, self._prompt_tokens + self.new_tokens.value()
        if context is not None and total > context:
            return (
                f"prompt ({self._prompt_tokens} tokens) + new tokens ({self.new_tokens.value()}) exceed the "
                f"model's context of {context} tokens"
            )
        return ""

    # --- writing ----------------------------------------------------------------------------
    def set_model_spec(self, spec: str) -> None:
        """Select a source (adding a folder path to the list if needed)."""
        if self.model_combo.findText(spec) < 0:
            self._folders.append(spec)
            self.model_combo.insertItem(self.model_combo.count() - 1, spec)
        self.model_combo.setCurrentText(spec)

    def set_engines(self, names: list[str]) -> None:
        self.picker.set_selected(names)

    def apply_preset(self, name: str) -> None:
        self.picker.apply_preset(name)

    def set_model_info(self, info: ModelInfo) -> None:
        if info.spec != self.model_spec():
            return
        self.model_info = info
        self.badge.setVisible(bool(info.is_random))
        self.notice.setText(info.notice)
        self.notice.setVisible(bool(info.notice))
        self.model_detail.setText(info.error or info.detail)
        self._update_counter()

    def _on_jobs_changed(self) -> None:
        running = self.jobs.busy()
        for widget in (
            self.model_combo,
            self.picker,
            self.threads,
            self.cold,
            self.prompt,
            self.examples,
            self.new_tokens,
            self.decoding,
            self.top_k,
            self.top_p,
            self.temperature,
            self.seed,
            self.repeats,
            self.until_sure,
            self.warmup,
            self.fair,
            self.race,
            *self.option_forms.values(),
        ):
            widget.setEnabled(not running)
        if not running:
            self._on_decoding(self.decoding.currentText())
        self._changed()

    def params(self) -> dict:
        return {
            "model": self.model_spec(),
            "folders": self._folders,
            "engines": self.selected_engines(),
            "threads": self.threads.value(),
            "prompt": self.prompt.toPlainText(),
            "new_tokens": self.new_tokens.value(),
            "decoding": self.decoding.currentText(),
            "temperature": self.temperature.value(),
            "top_k": self.top_k.value(),
            "top_p": self.top_p.value(),
            "seed": self.seed.value(),
            "repeats": self.repeats.value(),
            "warmup": self.warmup.value(),
            "mode": self.mode(),
            "cold": self.cold.isChecked(),
            "until_sure": self.until_sure.isChecked(),
            "target_width": self.target_width.value(),
            "max_minutes": self.max_minutes.value(),
            **{name: form.params() for name, form in self.option_forms.items()},
        }

    def set_params(self, params: dict) -> None:
        """Restore saved parameters; anything missing or of the wrong type keeps its default."""

        def get(key, kind):  # JSON gives bools for ints too: refuse them
            value = params.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        for folder in params.get("folders") or []:
            if isinstance(folder, str) and os.path.isdir(folder):
                self.set_model_spec(folder)
        model = get("model", str)
        if model and (self.model_combo.findText(model) >= 0) and model != LOCAL_FOLDER:
            self.model_combo.setCurrentText(model)
        if isinstance(params.get("engines"), list):
            self.set_engines([n for n in params["engines"] if isinstance(n, str)])
        for key, box in [
            ("threads", self.threads),
            ("new_tokens", self.new_tokens),
            ("top_k", self.top_k),
            ("seed", self.seed),
            ("repeats", self.repeats),
            ("warmup", self.warmup),
        ]:
            if get(key, int) is not None:
                set_clamped(box, params[key])
        for key, box in [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("target_width", self.target_width),
            ("max_minutes", self.max_minutes),
        ]:
            if get(key, (int, float)) is not None:
                box.setValue(float(params[key]))
        if params.get("decoding") in ("greedy", "sample"):
            self.decoding.setCurrentText(params["decoding"])
        if get("prompt", str) is not None:
            self.prompt.setPlainText(params["prompt"])
        (self.race if params.get("mode") == "race" else self.fair).setChecked(True)
        self.cold.setChecked(params.get("cold") is True)
        self.until_sure.setChecked(params.get("until_sure") is True)
        for name, form in self.option_forms.items():
            form.set_params(params.get(name))
        self._count_tokens()

    def show_session(self, params: dict, engine_options: dict[str, dict]) -> None:
        """A reopened session's settings (SessionData.setup_params), its engines' own settings with them."""
        self.set_params(params)
        for name, form in self.option_forms.items():
            form.set_recorded(engine_options.get(name, {}))

    # --- reactions --------------------------------------------------------------------------
    def _changed(self, *_args) -> None:
        if not self._built:
            return
        selected = self.selected_engines()
        for name, form in self.option_forms.items():
            form.setVisible(name in selected)
        problem = self.problem()
        self.run_button.setEnabled(not problem)
        self.run_button.setToolTip(problem or "Run the selected engines (Ctrl+Return)")
        shown = problem if problem and problem != "a run is in progress" else ""
        self.reason.setText(shown)
        self.reason.setStyleSheet(f"color: {current_theme().error};")
        self._update_estimate()
        self.changed.emit()

    def _update_estimate(self) -> None:
        """What Run would do now (backends/runs/estimate.py), under the engine list."""
        if not self.selected_engines():
            self.estimate_label.setText("")
            return
        config = self.config()
        result = estimate(config, self.model_info.files)
        # the panel stays beside every tab: say whose estimate it is (not the sweep's or the profile's)
        self.estimate_label.setText("Run (bench): " + "\n".join(result.lines()))

    def _on_source(self, text: str) -> None:
        if text == LOCAL_FOLDER:
            folder = QFileDialog.getExistingDirectory(self, "Folder with config.json and model.safetensors")
            self.model_combo.blockSignals(True)
            if folder:
                self.set_model_spec(folder)
            else:
                self.model_combo.setCurrentText(self._previous_source)
            self.model_combo.blockSignals(False)
            text = self.model_combo.currentText()
        self._previous_source = text
        self.probe.probe(text)
        self._changed()

    def _on_example(self, index: int) -> None:
        if index > 0:
            self.prompt.setPlainText(self._examples[self.examples.itemText(index)])
        self.examples.setCurrentIndex(0)

    def _on_decoding(self, decoding: str) -> None:
        sampling = decoding == "sample" and not self.jobs.busy()
        for widget in (self.temperature, self.top_k, self.top_p, self.seed):
            widget.setEnabled(sampling)
            widget.setStatusTip("" if sampling else "used only with sampling")
        self._changed()

    def _on_mode(self) -> None:
        self.mode_help.setText(MODE_HELP[self.mode()])
        self._changed()

    def _count_tokens(self) -> None:
        text = self.prompt.toPlainText()
        self._prompt_tokens = len(encode(text)) if text else 0
        self._update_counter()

    def _update_counter(self) -> None:
        total = self._prompt_tokens + self.new_tokens.value()
        context = self.model_info.context
        limit = f"{context}" if context is not None else "?"
        self.counter.setText(
            f"{total} / {limit} tokens  (prompt {self._prompt_tokens} + {self.new_tokens.value()} new)"
        )
        over = context is not None and total > context
        theme = current_theme()
        self.counter.setStyleSheet(f"color: {theme.error}; font-weight: bold;" if over else f"color: {theme.muted};")
        self._changed()

    @property
    def prompt_tokens(self) -> int:
        return self._prompt_tokens

    def flush(self) -> None:
        """Count the prompt now instead of after the debounce (tests, and just before Run)."""
        self._count_timer.stop()
        self._count_tokens()
