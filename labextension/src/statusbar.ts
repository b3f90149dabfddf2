/**
 * The status-bar item: trials running and the lanes they hold, summed over every listed
 * experiment, in words that fit the hardware: GPUs only on GPUs, CPU workers where CPU
 * workers stand in for them (`nbtune: 2 running · 2 CPU workers`).
 */
import { Widget } from '@lumino/widgets';

import { ExperimentsModel, inUseText } from './model';

export class StatusItem extends Widget {
  /** `onClick` runs when the item is clicked (the plugin opens the sidebar panel). */
  constructor(model: ExperimentsModel, onClick?: () => void) {
    super();
    this._model = model;
    this.addClass('jp-nbtune-status');
    this.node.title =
      'nbtune: trials running / GPUs or workers in use (click for the experiment list)';
    if (onClick) {
      this.node.addEventListener('click', onClick);
    }
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    this._model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const reply = this._model.reply;
    if (reply === null) {
      this.node.textContent = this._model.error ? 'nbtune: offline' : 'nbtune: …';
      return;
    }
    const t = reply.totals;
    this.node.textContent = `nbtune: ${t.trials_running} running · ${inUseText(t)}`;
    this.node.dataset.running = String(t.trials_running);
    this.node.dataset.gpus = String(t.gpus_in_use);
    this.node.dataset.device = t.device ?? '';
  }

  private _model: ExperimentsModel;
}
