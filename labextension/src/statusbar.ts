/** The status-bar item: trials running and GPUs in use, summed over every listed experiment. */
import { Widget } from '@lumino/widgets';

import { ExperimentsModel } from './model';

export class StatusItem extends Widget {
  /** `onClick` runs when the item is clicked (the plugin opens the sidebar panel). */
  constructor(model: ExperimentsModel, onClick?: () => void) {
    super();
    this._model = model;
    this.addClass('jp-nbtune-status');
    this.node.title = 'nbtune: trials running / GPUs in use (click for the experiment list)';
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
    this.node.textContent = `nbtune: ${t.trials_running} running · ${t.gpus_in_use} GPU${t.gpus_in_use === 1 ? '' : 's'}`;
    this.node.dataset.running = String(t.trials_running);
    this.node.dataset.gpus = String(t.gpus_in_use);
  }

  private _model: ExperimentsModel;
}
